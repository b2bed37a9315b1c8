//! What `flotilla join --kubeconfig` reads from a kubeconfig: one context's API server, CA
//! and credentials (a token or a client certificate), as `karmadactl join` does.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use serde_json::Value;

/// A member's API server and the credentials to reach it. `Debug` never shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The context used.
    pub context: String,
    /// `clusters[].cluster.server`.
    pub server: String,
    /// The CA bundle (PEM), if the kubeconfig names one.
    pub ca: Option<Hidden<Vec<u8>>>,
    /// A bearer token.
    pub token: Option<Hidden<String>>,
    /// A client certificate and key (PEM).
    pub client_cert: Option<Hidden<(Vec<u8>, Vec<u8>)>>,
    /// `insecure-skip-tls-verify`.
    pub insecure: bool,
}

/// A value `Debug` shows as `<redacted>`: a secret, or a certificate not worth printing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hidden<T>(pub T);

impl<T> std::fmt::Debug for Hidden<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The entry `name` of the list `section` (`clusters`, `users`, `contexts`).
fn entry<'a>(doc: &'a Value, section: &str, name: &str) -> anyhow::Result<&'a Value> {
    doc.get(section)
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
        })
        .ok_or_else(|| anyhow!("the kubeconfig has no {section} entry named {name:?}"))
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A value given inline as base64 (`<key>-data`) or as a file (`<key>`, relative to the
/// kubeconfig's directory).
fn bytes(v: &Value, key: &str, dir: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    if let Some(data) = text(v, &format!("{key}-data")) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .with_context(|| format!("{key}-data is not base64"))?;
        return Ok(Some(decoded));
    }
    match text(v, key) {
        None => Ok(None),
        Some(path) => {
            let path: PathBuf = dir.join(path);
            std::fs::read(&path)
                .map(Some)
                .with_context(|| format!("reading {key} {}", path.display()))
        }
    }
}

/// Reads `context` (default: the current context) of the kubeconfig at `path`.
pub fn read(path: &Path, context: Option<&str>) -> anyhow::Result<Credentials> {
    let raw = std::fs::read_to_string(path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    let doc: Value = serde_norway::from_str(&raw)
        .with_context(|| format!("{} is not a kubeconfig (YAML)", path.display()))?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let context_name = match context {
        Some(c) => c.to_owned(),
        None => text(&doc, "current-context")
            .ok_or_else(|| anyhow!("the kubeconfig has no current-context; pass --context"))?
            .to_owned(),
    };
    let ctx = entry(&doc, "contexts", &context_name)?
        .get("context")
        .ok_or_else(|| anyhow!("context {context_name:?} is empty"))?;
    let cluster_name =
        text(ctx, "cluster").ok_or_else(|| anyhow!("context {context_name:?} names no cluster"))?;
    let cluster = entry(&doc, "clusters", cluster_name)?
        .get("cluster")
        .ok_or_else(|| anyhow!("cluster {cluster_name:?} is empty"))?;
    let server = text(cluster, "server")
        .ok_or_else(|| anyhow!("cluster {cluster_name:?} has no server"))?
        .to_owned();
    if text(cluster, "proxy-url").is_some() {
        bail!("cluster {cluster_name:?} uses proxy-url, which Flotilla does not support");
    }
    let insecure = cluster
        .get("insecure-skip-tls-verify")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ca = bytes(cluster, "certificate-authority", dir)?.map(Hidden);
    let mut creds = Credentials {
        context: context_name.clone(),
        server,
        ca,
        insecure,
        ..Credentials::default()
    };
    let Some(user_name) = text(ctx, "user") else {
        bail!(
            "context {context_name:?} names no user: Flotilla needs a token or a client certificate"
        );
    };
    let user = entry(&doc, "users", user_name)?
        .get("user")
        .cloned()
        .unwrap_or(Value::Null);
    for unsupported in ["exec", "auth-provider"] {
        if user.get(unsupported).is_some() {
            bail!(
                "user {user_name:?} authenticates with `{unsupported}`, which Flotilla cannot \
                 run; give it a ServiceAccount token instead (kubectl create token …)"
            );
        }
    }
    if let Some(token) = text(&user, "token") {
        creds.token = Some(Hidden(token.trim().to_owned()));
    } else if let Some(file) = text(&user, "tokenFile") {
        let path = dir.join(file);
        let token = std::fs::read_to_string(&path)
            .with_context(|| format!("reading tokenFile {}", path.display()))?;
        creds.token = Some(Hidden(token.trim().to_owned()));
    }
    let cert = bytes(&user, "client-certificate", dir)?;
    let key = bytes(&user, "client-key", dir)?;
    creds.client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some(Hidden((c, k))),
        (None, None) => None,
        _ => bail!(
            "user {user_name:?} has a client certificate without its key, or a key without its certificate"
        ),
    };
    if creds.token.is_none() && creds.client_cert.is_none() {
        bail!(
            "user {user_name:?} has neither a token nor a client certificate (username/password \
             is not supported)"
        );
    }
    Ok(creds)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const CONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: kind-member1
clusters:
- name: kind-member1
  cluster:
    server: https://127.0.0.1:36443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: other
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: kind-member1
  context: {cluster: kind-member1, user: kind-member1}
- name: other
  context: {cluster: other, user: certs}
- name: cloud
  context: {cluster: other, user: cloud}
users:
- name: kind-member1
  user: {token: s3cr3t-t0ken}
- name: certs
  user: {client-certificate: cert.pem, client-key-data: S0VZ}
- name: cloud
  user:
    exec: {command: gke-gcloud-auth-plugin}
"#;

    fn write() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, CONFIG).unwrap();
        std::fs::write(dir.path().join("cert.pem"), "CERT").unwrap();
        (dir, path)
    }

    #[test]
    fn reads_the_current_context_and_a_named_one() {
        let (_dir, path) = write();
        let c = read(&path, None).unwrap();
        assert_eq!(c.server, "https://127.0.0.1:36443");
        assert_eq!(c.token.as_ref().map(|t| t.0.as_str()), Some("s3cr3t-t0ken"));
        assert_eq!(
            c.ca.as_ref().map(|ca| ca.0.as_slice()),
            Some(&b"-----BEGIN CERTIFICATE-----\n"[..])
        );
        assert!(
            !format!("{c:?}").contains("s3cr3t"),
            "Debug redacts the token"
        );

        let c = read(&path, Some("other")).unwrap();
        assert!(c.insecure);
        assert_eq!(
            c.client_cert,
            Some(Hidden((b"CERT".to_vec(), b"KEY".to_vec())))
        );
    }

    #[test]
    fn refuses_what_it_cannot_use_clearly() {
        let (_dir, path) = write();
        let e = read(&path, Some("cloud")).unwrap_err().to_string();
        assert!(e.contains("`exec`"), "{e}");
        let e = read(&path, Some("nope")).unwrap_err().to_string();
        assert!(e.contains("no contexts entry named \"nope\""), "{e}");
        let e = read(Path::new("/nonexistent/config"), None).unwrap_err();
        assert!(format!("{e:#}").contains("reading the kubeconfig"), "{e:#}");
    }
}
