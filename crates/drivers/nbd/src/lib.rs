//! NBD over tokio: the client endpoint and the server front end.
