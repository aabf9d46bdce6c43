//! Which deployment a command talks to: `--url` / `--config` / `DLOCK_URL`, loaded the way the
//! library loads its configuration, and a lock name on it.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::redactor::Redactor;
use dlock::{Config, DistributedLock, LockError, LockName};

#[derive(Args)]
pub(crate) struct Target {
    /// Backend URL (overrides the config file).
    #[arg(long, env = "DLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Config file (default: dlock.toml in the working directory, or DLOCK_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Target {
    /// The configuration, its URL handed to the redactor before anything may print it.
    pub(crate) fn load(&self, redactor: &Redactor) -> Result<Config, LockError> {
        redactor.add(self.url.clone());
        let mut config = match (&self.config, &self.url) {
            (Some(path), _) => Config::load_file(path)?,
            // --url given: nothing falls back, so Config::load's warning would be wrong.
            (None, Some(url)) => {
                let fig = Config::figment(Some(&Config::default_file()))?.merge(("url", url.as_str()));
                Config::extract(fig)?
            }
            (None, None) => Config::load()?,
        };
        if let Some(url) = &self.url {
            config.url = url.clone();
            config.validate()?;
        }
        redactor.add(Some(config.url.clone()));
        Ok(config)
    }
}

/// A backend and one lock name on it (`status`, `watch`, `release`).
#[derive(Args)]
pub(crate) struct NamedLock {
    #[command(flatten)]
    target: Target,
    /// The lock name.
    name: String,
}

impl NamedLock {
    /// The configuration (see [`Target::load`]) and the checked lock name.
    pub(crate) fn load(&self, redactor: &Redactor) -> Result<(Config, LockName), LockError> {
        Ok((self.target.load(redactor)?, LockName::new(&self.name)?))
    }

    /// [`NamedLock::load`], then a client of the backend.
    pub(crate) async fn open(
        &self,
        redactor: &Redactor,
    ) -> Result<(Config, LockName, Arc<dyn DistributedLock>), LockError> {
        let (config, name) = self.load(redactor)?;
        let lock = dlock::connect_with(&config).await?;
        Ok((config, name, lock))
    }
}
