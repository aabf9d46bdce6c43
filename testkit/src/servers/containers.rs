//! The container path of [`provision`](super::provision): an official image through testcontainers,
//! on a fixed host port (so a stop/start keeps the address), controlled through Docker.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::{ContainerSpec, Source, TestServer};
use crate::process::{free_port, wait_for_port};
use crate::ServerControl;

fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> LockError {
    LockError::unavailable_from("test", format!("{what}; check that Docker runs (`docker info`)"), e)
}

pub(super) async fn start(
    spec: &ContainerSpec,
    url_for: &dyn Fn(SocketAddr) -> String,
) -> Result<TestServer, LockError> {
    let mut image = GenericImage::new(spec.image.clone(), spec.tag.clone()).with_exposed_port(spec.port.tcp());
    if let Some(m) = &spec.ready_message {
        image = image.with_wait_for(WaitFor::message_on_either_std(m.as_bytes()));
    }
    // A fixed host port keeps the address across stop/start.
    let host_port = free_port()?;
    let mut req = image.with_mapped_port(host_port, spec.port.tcp()).with_startup_timeout(Duration::from_secs(120));
    for (k, v) in &spec.env {
        req = req.with_env_var(k.clone(), v.clone());
    }
    if !spec.cmd.is_empty() {
        req = req.with_cmd(spec.cmd.clone());
    }
    let container = req.start().await.map_err(|e| err("cannot start the container", e))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], host_port));
    wait_for_port(addr, Duration::from_secs(60)).await?;
    let control = Arc::new(ContainerControl { container, addr, persistent: spec.persistent });
    Ok(TestServer::owned(
        Source::Container { image: format!("{}:{}", spec.image, spec.tag) },
        url_for(addr),
        addr,
        control,
        Vec::new(),
    ))
}

struct ContainerControl {
    container: ContainerAsync<GenericImage>,
    addr: SocketAddr,
    persistent: bool,
}

#[async_trait]
impl ServerControl for ContainerControl {
    async fn stop(&self) -> Result<(), LockError> {
        self.container.stop_with_timeout(Some(0)).await.map_err(|e| err("cannot stop the container", e))
    }
    async fn start(&self) -> Result<(), LockError> {
        self.container.start().await.map_err(|e| err("cannot start the container", e))?;
        wait_for_port(self.addr, Duration::from_secs(60)).await
    }
    async fn pause(&self, paused: bool) -> Result<(), LockError> {
        let r = if paused { self.container.pause().await } else { self.container.unpause().await };
        r.map_err(|e| err("cannot pause or unpause the container", e))
    }
    fn persistent(&self) -> bool {
        self.persistent
    }
}
