//! Opening the byte stream to a device: a serial port or pty, a unix
//! socket (QEMU's `-serial unix:PATH`), or TCP (`tcp:HOST:PORT`, as served
//! by ser2net-style serial servers).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A byte stream to a device.
pub trait Port: Read + Write + Send {}

impl<T: Read + Write + Send> Port for T {}

/// Where a device is, as given on a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `tcp:HOST:PORT`.
    Tcp(String),
    /// A filesystem path: a unix socket, or else a serial port or pty.
    Path(String),
}

impl Target {
    /// Parses `tcp:HOST:PORT` or a path.
    pub fn parse(target: &str) -> Self {
        match target.strip_prefix("tcp:") {
            Some(address) => Target::Tcp(address.to_owned()),
            None => Target::Path(target.to_owned()),
        }
    }

    /// Opens the stream; every read waits at most `timeout`. `baud` applies
    /// to serial ports only.
    pub fn open(&self, baud: u32, timeout: Duration) -> io::Result<Box<dyn Port>> {
        match self {
            Target::Tcp(address) => {
                let stream = TcpStream::connect(address)?;
                stream.set_read_timeout(Some(timeout))?;
                stream.set_nodelay(true)?;
                Ok(Box::new(stream))
            }
            Target::Path(path) if std::fs::metadata(path)?.file_type().is_socket() => {
                let stream = UnixStream::connect(path)?;
                stream.set_read_timeout(Some(timeout))?;
                Ok(Box::new(stream))
            }
            Target::Path(path) => {
                let port = serialport::new(path, baud)
                    .timeout(timeout)
                    .open_native()
                    .map_err(io::Error::other)?;
                Ok(Box::new(port))
            }
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp(address) => write!(f, "tcp:{address}"),
            Target::Path(path) => f.write_str(path),
        }
    }
}
