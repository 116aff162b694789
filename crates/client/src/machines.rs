//! The machine-driver API (service `machine-driver`, DESIGN.md "Machine driver API").

use crate::ServiceClient;

/// A typed client of this API.
#[derive(Debug, Clone)]
pub struct Client {
    inner: ServiceClient,
}

impl Client {
    /// Wraps a [`ServiceClient`] pointed at the service (or at the gateway).
    pub fn new(inner: ServiceClient) -> Self {
        Client { inner }
    }

    /// The shared client underneath.
    pub fn service(&self) -> &ServiceClient {
        &self.inner
    }
}
