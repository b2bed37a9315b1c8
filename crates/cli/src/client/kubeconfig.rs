//! What `flotilla join --kubeconfig` reads from a kubeconfig: one context's API server, CA
//! and credentials (a token or a client certificate), as `karmadactl join` does. The file is
//! parsed by kube's `Kubeconfig` (which also resolves file paths against the kubeconfig's
//! directory); the secrets it yields are `secrecy` types, which `Debug` never shows.

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use kube::config::{AuthInfo, Kubeconfig};
use secrecy::{ExposeSecret as _, SecretSlice, SecretString};

/// A member's API server and the credentials to reach it. `Debug` never shows them.
#[derive(Default)]
pub struct Credentials {
    /// The context used.
    pub context: String,
    /// `clusters[].cluster.server`.
    pub server: String,
    /// The CA bundle (PEM), if the kubeconfig names one.
    pub ca: Option<Vec<u8>>,
    /// A bearer token.
    pub token: Option<SecretString>,
    /// A client certificate and its key (PEM).
    pub client_cert: Option<ClientCert>,
    /// `insecure-skip-tls-verify`.
    pub insecure: bool,
}

/// A client certificate (PEM) and its key (PEM, secret).
pub struct ClientCert {
    /// The certificate.
    pub cert: Vec<u8>,
    /// The private key.
    pub key: SecretSlice<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("context", &self.context)
            .field("server", &self.server)
            .field("ca", &self.ca.as_ref().map(|ca| ca.len()))
            .field("token", &self.token)
            .field(
                "client_cert",
                &self.client_cert.as_ref().map(|_| "<redacted>"),
            )
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// A value given inline as base64 (`<key>-data`) or as a file (`<key>`, already made
/// absolute by `Kubeconfig::read_from`).
fn bytes(data: Option<&str>, file: Option<&str>, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .with_context(|| format!("{key}-data is not base64"))?;
        return Ok(Some(decoded));
    }
    match file.filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(path) => std::fs::read(path)
            .map(Some)
            .with_context(|| format!("reading {key} {path}")),
    }
}

/// The body of the entry `name` of the list `section` (`contexts`, `clusters`), which `parts`
/// splits into its name and body.
fn entry<'a, T, B>(
    list: &'a [T],
    section: &str,
    name: &str,
    parts: impl Fn(&'a T) -> (&'a str, Option<&'a B>),
) -> anyhow::Result<&'a B> {
    let (_, body) = list
        .iter()
        .map(parts)
        .find(|(n, _)| *n == name)
        .ok_or_else(|| anyhow!("the kubeconfig has no {section} entry named {name:?}"))?;
    body.ok_or_else(|| anyhow!("{section} entry {name:?} is empty"))
}

/// Reads `context` (default: the current context) of the kubeconfig at `path`.
pub fn read(path: &Path, context: Option<&str>) -> anyhow::Result<Credentials> {
    if let Err(e) = std::fs::metadata(path) {
        return Err(e).with_context(|| format!("reading the kubeconfig {}", path.display()));
    }
    let doc = Kubeconfig::read_from(path)
        .with_context(|| format!("{} is not a kubeconfig (YAML)", path.display()))?;
    let context_name = match context {
        Some(c) => c.to_owned(),
        None => doc
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| anyhow!("the kubeconfig has no current-context; pass --context"))?,
    };
    let ctx = entry(&doc.contexts, "contexts", &context_name, |c| {
        (c.name.as_str(), c.context.as_ref())
    })?;
    let cluster_name = ctx.cluster.as_str();
    if cluster_name.is_empty() {
        bail!("context {context_name:?} names no cluster");
    }
    let cluster = entry(&doc.clusters, "clusters", cluster_name, |c| {
        (c.name.as_str(), c.cluster.as_ref())
    })?;
    let server = cluster
        .server
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("cluster {cluster_name:?} has no server"))?;
    if cluster.proxy_url.as_deref().is_some_and(|p| !p.is_empty()) {
        bail!("cluster {cluster_name:?} uses proxy-url, which Flotilla does not support");
    }
    let ca = bytes(
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        "certificate-authority",
    )?;
    let mut creds = Credentials {
        context: context_name.clone(),
        server,
        ca,
        insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
        ..Credentials::default()
    };
    let Some(user_name) = ctx.user.as_deref().filter(|u| !u.is_empty()) else {
        bail!(
            "context {context_name:?} names no user: Flotilla needs a token or a client certificate"
        );
    };
    let user: AuthInfo = doc
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .ok_or_else(|| anyhow!("the kubeconfig has no users entry named {user_name:?}"))?
        .auth_info
        .clone()
        .unwrap_or_default();
    for (unsupported, present) in [
        ("exec", user.exec.is_some()),
        ("auth-provider", user.auth_provider.is_some()),
    ] {
        if present {
            bail!(
                "user {user_name:?} authenticates with `{unsupported}`, which Flotilla cannot \
                 run; give it a ServiceAccount token instead (kubectl create token …)"
            );
        }
    }
    if let Some(token) = user
        .token
        .as_ref()
        .filter(|t| !t.expose_secret().is_empty())
    {
        creds.token = Some(SecretString::from(token.expose_secret().trim()));
    } else if let Some(file) = user.token_file.as_deref().filter(|f| !f.is_empty()) {
        let token =
            std::fs::read_to_string(file).with_context(|| format!("reading tokenFile {file}"))?;
        creds.token = Some(SecretString::from(token.trim()));
    }
    let cert = bytes(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        "client-certificate",
    )?;
    let key = bytes(
        user.client_key_data.as_ref().map(|k| k.expose_secret()),
        user.client_key.as_deref(),
        "client-key",
    )?;
    creds.client_cert = match (cert, key) {
        (Some(cert), Some(key)) => Some(ClientCert {
            cert,
            key: SecretSlice::from(key),
        }),
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
    use std::path::PathBuf;

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
        assert_eq!(
            c.token.as_ref().map(|t| t.expose_secret()),
            Some("s3cr3t-t0ken")
        );
        assert_eq!(c.ca.as_deref(), Some(&b"-----BEGIN CERTIFICATE-----\n"[..]));
        assert!(
            !format!("{c:?}").contains("s3cr3t"),
            "Debug redacts the token"
        );

        let c = read(&path, Some("other")).unwrap();
        assert!(c.insecure);
        let client = c.client_cert.as_ref().unwrap();
        assert_eq!(client.cert, b"CERT");
        assert_eq!(client.key.expose_secret(), b"KEY");
        assert!(
            !format!("{c:?}").contains("KEY"),
            "Debug redacts the key: {c:?}"
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
