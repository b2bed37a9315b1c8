//! A kubeconfig for Flotilla's Kubernetes API: what `flotilla kubeconfig` prints and
//! `flotilla up --write-kubeconfig` writes, so that kubectl (and any client library that reads
//! kubeconfigs) reaches the gateway with one `--kubeconfig` flag.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::json;

/// What goes into the kubeconfig.
#[derive(Default)]
pub struct KubeconfigFor<'a> {
    /// The gateway's URL (`https://127.0.0.1:7406`).
    pub server: &'a str,
    /// The CA bundle (PEM) that signed the gateway's certificate, embedded.
    pub ca_pem: Option<&'a [u8]>,
    /// A bearer token of the api's (`--auth-tokens-file`).
    pub token: Option<&'a str>,
    /// The name of its cluster, user and context (`flotilla`).
    pub name: &'a str,
}

/// The kubeconfig as YAML, with one cluster, user and context, the context current.
pub fn render(config: &KubeconfigFor<'_>) -> anyhow::Result<String> {
    anyhow::ensure!(
        config.server.starts_with("http://") || config.server.starts_with("https://"),
        "the server {:?} must be an http:// or https:// URL",
        config.server
    );
    anyhow::ensure!(!config.name.is_empty(), "the name must not be empty");
    if let Some(pem) = config.ca_pem {
        anyhow::ensure!(
            String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----"),
            "the certificate authority is not a PEM certificate"
        );
    }
    let mut cluster = json!({ "server": config.server });
    if let Some(pem) = config.ca_pem {
        cluster["certificate-authority-data"] =
            base64::engine::general_purpose::STANDARD.encode(pem).into();
    }
    let mut user = json!({});
    if let Some(token) = config.token {
        anyhow::ensure!(
            !token.trim().is_empty() && !token.contains(char::is_whitespace),
            "the token must be one word"
        );
        user["token"] = token.into();
    }
    let name = config.name;
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": name, "cluster": cluster }],
        "users": [{ "name": name, "user": user }],
        "contexts": [{ "name": name, "context": { "cluster": name, "user": name } }],
        "current-context": name,
        "preferences": {},
    });
    serde_norway::to_string(&document).context("writing the kubeconfig")
}

/// Writes `text` to `path` readable by its owner only (it may hold a token), all or
/// nothing: into a temporary file beside it, then renamed over it.
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?
        .to_string_lossy()
        .into_owned();
    let temporary = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_names_one_context_and_refuses_what_kubectl_could_not_use() {
        let text = render(&KubeconfigFor {
            server: "https://127.0.0.1:7406",
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
            token: Some("admin-1234"),
            name: "flotilla",
        })
        .unwrap();
        let parsed: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(parsed["current-context"], "flotilla");
        assert_eq!(
            parsed["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:7406"
        );
        assert_eq!(parsed["users"][0]["user"]["token"], "admin-1234");
        assert!(parsed["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
        let open = render(&KubeconfigFor {
            server: "http://127.0.0.1:7406",
            name: "flotilla",
            ..KubeconfigFor::default()
        })
        .unwrap();
        assert!(!open.contains("token"), "{open}");
        for (bad, says) in [
            (
                KubeconfigFor {
                    server: "127.0.0.1:7406",
                    name: "f",
                    ..Default::default()
                },
                "URL",
            ),
            (
                KubeconfigFor {
                    server: "http://h",
                    name: "",
                    ..Default::default()
                },
                "name",
            ),
            (
                KubeconfigFor {
                    server: "http://h",
                    name: "f",
                    token: Some("two words"),
                    ..Default::default()
                },
                "one word",
            ),
            (
                KubeconfigFor {
                    server: "https://h",
                    name: "f",
                    ca_pem: Some(b"junk"),
                    ..Default::default()
                },
                "PEM",
            ),
        ] {
            let e = render(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn written_private_and_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_private(&path, "a: 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a: 1\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        assert!(write_private(&dir.path().join("no/such/dir/k"), "x").is_err());
    }
}
