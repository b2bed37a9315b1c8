//! `flotilla credentials`: the credentials of an installation that has none yet.
//!
//! docker-compose runs `flotilla credentials init /credentials` once, before any service
//! starts. It writes a tokens file with one `admin` token, which every service reads through
//! `FLOTILLA_AUTH_TOKENS_FILE`, and that token beside it (`admin.token`, mode 0600). A second
//! run changes nothing, so restarts keep the token. `flotilla credentials admin-token DIR`
//! prints the token for the operator (`FLOTILLA_TOKEN=$(…)`).
//!
//! It also makes the Kubernetes API gateway's TLS (kubectl sends a token over TLS only): a
//! CA of the installation's own (`kube-ca.pem`, its key is not kept) and a server
//! certificate it signed for `localhost`, `127.0.0.1` and `kube-gateway` (`kube.pem`,
//! `kube-key.pem`). `flotilla credentials kubeconfig DIR` prints a kubeconfig with that CA
//! and the admin token.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use flotilla_runtime::Principal;
use flotilla_runtime::security::{new_token, tokens_line};

/// `flotilla credentials …`.
#[derive(Debug, clap::Subcommand)]
pub enum CredentialsCommand {
    /// Make DIR/tokens (the services' --auth-tokens-file) with one admin token, and the token
    /// itself in DIR/admin.token (mode 0600), unless DIR/tokens exists: then nothing changes.
    Init {
        /// Where the files go (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,

        /// Give the gateway's private key (DIR/kube-key.pem, mode 0600) to this user and
        /// group (`65532:65532`, the images' user), so that a gateway that is not root
        /// reads it. Needs root.
        #[arg(long, value_name = "UID:GID", value_parser = owner)]
        key_owner: Option<(u32, u32)>,
    },
    /// Print a kubeconfig for the Kubernetes API gateway with the CA and the admin token
    /// `init` made.
    Kubeconfig {
        /// The directory `init` wrote.
        #[arg(value_name = "DIR")]
        dir: PathBuf,

        /// The gateway's URL as kubectl reaches it (docker-compose publishes 127.0.0.1:7406).
        #[arg(long, default_value = "https://127.0.0.1:7406", value_name = "URL")]
        server: String,
    },
    /// Print the admin token `init` made (for `FLOTILLA_TOKEN=$(flotilla credentials
    /// admin-token DIR)`).
    AdminToken {
        /// The directory `init` wrote.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// Runs `flotilla credentials`.
pub fn run(command: CredentialsCommand) -> anyhow::Result<ExitCode> {
    match command {
        CredentialsCommand::Init { dir, key_owner } => {
            if init(&dir)? {
                println!(
                    "credentials made in {}: tokens (for --auth-tokens-file) and admin.token",
                    dir.display()
                );
            } else {
                println!(
                    "{} exists: credentials kept as they are",
                    dir.join("tokens").display()
                );
            }
            if kube_tls(&dir, key_owner)? {
                println!(
                    "the Kubernetes API's TLS made in {}: kube-ca.pem, kube.pem, kube-key.pem",
                    dir.display()
                );
            } else {
                println!(
                    "{} exists: the Kubernetes API's TLS kept as it is",
                    dir.join("kube.pem").display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CredentialsCommand::Kubeconfig { dir, server } => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
            };
            let ca = read("kube-ca.pem")?;
            let token = String::from_utf8(read("admin.token")?).context("admin.token")?;
            print!(
                "{}",
                flotilla_kube::kubeconfig::render(&flotilla_kube::kubeconfig::KubeconfigFor {
                    server: &server,
                    ca_pem: Some(&ca),
                    token: Some(token.trim()),
                    name: "flotilla",
                })?
            );
            Ok(ExitCode::SUCCESS)
        }
        CredentialsCommand::AdminToken { dir } => {
            let path = dir.join("admin.token");
            let token = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            println!("{}", token.trim());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Writes the files unless `dir/tokens` exists; whether it wrote them. The token file is
/// written first and the tokens file last, so that an interrupted run is redone next time.
pub fn init(dir: &Path) -> anyhow::Result<bool> {
    let tokens = dir.join("tokens");
    if tokens.exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let token = new_token()
        .map_err(|_| anyhow::anyhow!("the operating system's random generator failed"))?;
    write_private(&dir.join("admin.token"), &token)?;
    let text = format!(
        "# Flotilla's bearer tokens: `<sha256 hex> <principal>` per line (docs/design.md §9).\n\
         # Made by `flotilla credentials init`; add agents with `flotilla join --pull \
         --agent-token-file`.\n{}",
        tokens_line(&token, &Principal::Admin)
    );
    // world-readable: it holds digests only, and every service's user must read it
    std::fs::write(&tokens, text).with_context(|| format!("cannot write {}", tokens.display()))?;
    Ok(true)
}

/// `UID:GID`.
fn owner(text: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected UID:GID, e.g. 65532:65532"))?;
    let number = |n: &str| {
        n.parse::<u32>()
            .map_err(|_| format!("{n:?} in {text:?} is not a number"))
    };
    Ok((number(uid)?, number(gid)?))
}

/// The hosts the gateway's certificate names: kubectl on the host (`127.0.0.1`, `localhost`)
/// and other containers (`kube-gateway`).
const GATEWAY_HOSTS: &[&str] = &["localhost", "127.0.0.1", "kube-gateway"];

/// Makes `dir/kube-ca.pem`, `dir/kube.pem` and `dir/kube-key.pem` unless `dir/kube.pem`
/// exists; whether it made them. The certificate is written last, so that an interrupted
/// run is redone. The CA's key is dropped: nothing else is ever signed by it.
pub fn kube_tls(dir: &Path, key_owner: Option<(u32, u32)>) -> anyhow::Result<bool> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let cert_path = dir.join("kube.pem");
    if cert_path.exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).context("the CA's parameters")?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "flotilla kube-gateway CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().context("the CA's key")?;
    let ca_cert = ca.self_signed(&ca_key).context("signing the CA")?;
    let hosts: Vec<String> = GATEWAY_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    let mut server = CertificateParams::new(hosts).context("the certificate's parameters")?;
    server
        .distinguished_name
        .push(DnType::CommonName, "flotilla kube-gateway");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().context("the gateway's key")?;
    let cert = server
        .signed_by(&key, &ca_cert, &ca_key)
        .context("signing the gateway's certificate")?;
    std::fs::write(dir.join("kube-ca.pem"), ca_cert.pem())
        .with_context(|| format!("cannot write {}", dir.join("kube-ca.pem").display()))?;
    let key_path = dir.join("kube-key.pem");
    write_private(&key_path, &key.serialize_pem())?;
    #[cfg(unix)]
    if let Some((uid, gid)) = key_owner {
        std::os::unix::fs::chown(&key_path, Some(uid), Some(gid)).with_context(|| {
            format!(
                "--key-owner {uid}:{gid}: cannot chown {}",
                key_path.display()
            )
        })?;
    }
    std::fs::write(&cert_path, cert.pem())
        .with_context(|| format!("cannot write {}", cert_path.display()))?;
    Ok(true)
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_once_then_keeps_what_it_made() {
        let dir = std::env::temp_dir().join(format!("flotilla-creds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(init(&dir).unwrap());
        let token = std::fs::read_to_string(dir.join("admin.token")).unwrap();
        let tokens = flotilla_runtime::AuthTokens::from_file(&dir.join("tokens")).unwrap();
        assert_eq!(tokens.principal_of(&token), Some(Principal::Admin));
        assert!(!init(&dir).unwrap(), "a second run changes nothing");
        assert_eq!(
            std::fs::read_to_string(dir.join("admin.token")).unwrap(),
            token
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("admin.token"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The gateway's TLS: a certificate its CA signed for the gateway's hosts, a key that
    /// rustls serves with, made once.
    #[test]
    fn kube_tls_is_made_once_and_serves() {
        let dir = tempfile::tempdir().unwrap();
        assert!(kube_tls(dir.path(), None).unwrap());
        let cert = std::fs::read_to_string(dir.path().join("kube.pem")).unwrap();
        assert!(
            !kube_tls(dir.path(), None).unwrap(),
            "a second run changes nothing"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("kube.pem")).unwrap(),
            cert
        );
        let tls = flotilla_runtime::tls::ServerTls::load(flotilla_runtime::tls::ServerTlsFiles {
            cert: dir.path().join("kube.pem"),
            key: dir.path().join("kube-key.pem"),
            client_ca: None,
            client_cert_optional: false,
        });
        assert!(tls.is_ok(), "{:?}", tls.err());
        // openssl checks the chain and the names the way kubectl's client will
        for (flag, name) in [
            ("-verify_hostname", "kube-gateway"),
            ("-verify_ip", "127.0.0.1"),
        ] {
            let out = std::process::Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(dir.path().join("kube-ca.pem"))
                .args([flag, name])
                .arg(dir.path().join("kube.pem"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        assert_eq!(owner("65532:65532"), Ok((65532, 65532)));
        assert!(owner("65532").is_err() && owner("a:b").is_err());
    }
}
