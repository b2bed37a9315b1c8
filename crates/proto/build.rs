//! Compiles `proto/flotilla/v1/*.proto` without a system `protoc`: `protox` parses them (it
//! ships the `google/protobuf/*` well-known types), `tonic-prost-build` generates messages,
//! clients and servers, and the file-descriptor set is written to `OUT_DIR` for reflection.

use std::error::Error;
use std::path::PathBuf;
use std::{env, fs};

use prost::Message;

/// File name of the encoded `FileDescriptorSet` in `OUT_DIR` (see `FILE_DESCRIPTOR_SET`).
const DESCRIPTOR_FILE: &str = "flotilla_v1_descriptor.bin";

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let package_dir = proto_root.join("flotilla/v1");

    // A directory makes cargo re-run on any change below it, including new files.
    println!("cargo:rerun-if-changed={}", package_dir.display());

    let mut files = Vec::new();
    for entry in fs::read_dir(&package_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "proto") {
            let name = path.file_name().ok_or("proto file without a name")?;
            files.push(PathBuf::from("flotilla/v1").join(name));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no .proto files in {}", package_dir.display()).into());
    }

    // Source info is kept so that reflection (`grpcurl describe`) shows the comments.
    let fds = protox::compile(&files, [&proto_root]).map_err(|e| format!("{e:?}"))?;

    // The error details the servers send (`google.rpc.BadRequest`) are served by reflection
    // too, so that grpcurl decodes them; no Rust code is generated for them (tonic-types
    // has the type).
    let details = PathBuf::from("google/rpc/error_details.proto");
    println!(
        "cargo:rerun-if-changed={}",
        proto_root.join(&details).display()
    );
    let mut reflected = fds.clone();
    let extra = protox::compile([&details], [&proto_root]).map_err(|e| format!("{e:?}"))?;
    for file in extra.file {
        if !reflected.file.iter().any(|f| f.name == file.name) {
            reflected.file.push(file);
        }
    }

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join(DESCRIPTOR_FILE), reflected.encode_to_vec())?;

    tonic_prost_build::configure()
        // Deterministic encoding: the same object always encodes to the same bytes.
        .btree_map(".")
        .compile_fds(fds)?;
    Ok(())
}
