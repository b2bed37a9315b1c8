//! `flotilla credentials`: the credentials of an installation that has none yet.
//!
//! docker-compose runs `flotilla credentials init /credentials` once, before any service
//! starts. It writes a tokens file with one `admin` token, which every service reads through
//! `FLOTILLA_AUTH_TOKENS_FILE`, and that token beside it (`admin.token`, mode 0600). A second
//! run changes nothing, so restarts keep the token. `flotilla credentials admin-token DIR`
//! prints the token for the operator (`FLOTILLA_TOKEN=$(…)`).

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
        CredentialsCommand::Init { dir } => {
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
}
