//! Opening the byte stream to a device: a serial port or pty, a unix
//! socket (QEMU's `-serial unix:PATH`), TCP (`tcp:HOST:PORT`, as served
//! by ser2net-style serial servers), or sealed UDP datagrams to a device
//! on the network (`udp:HOST:PORT`, see [`super::sealed`]).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use super::sealed::{read_key, SealedUdp};

/// A byte stream to a device.
pub trait Port: Read + Write + Send {}

impl<T: Read + Write + Send> Port for T {}

/// How to open a port beyond its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSettings {
    /// The baud rate of a serial port.
    pub baud: u32,
    /// The file holding the key of a device on the network (`udp:`).
    pub key_file: Option<PathBuf>,
}

/// Where a device is, as given on a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `tcp:HOST:PORT`.
    Tcp(String),
    /// `udp:HOST:PORT`.
    Udp(String),
    /// A filesystem path: a unix socket, or else a serial port or pty.
    Path(String),
}

impl Target {
    /// Parses `tcp:HOST:PORT`, `udp:HOST:PORT` or a path.
    pub fn parse(target: &str) -> Self {
        if let Some(address) = target.strip_prefix("tcp:") {
            Target::Tcp(address.to_owned())
        } else if let Some(address) = target.strip_prefix("udp:") {
            Target::Udp(address.to_owned())
        } else {
            Target::Path(target.to_owned())
        }
    }

    /// Opens the stream; every read waits at most `timeout`.
    pub fn open(&self, settings: &PortSettings, timeout: Duration) -> io::Result<Box<dyn Port>> {
        match self {
            Target::Udp(address) => {
                let key_file = settings.key_file.as_deref().ok_or_else(|| {
                    io::Error::other(
                        "a device on the network needs --device-key FILE (the 64 hex digits \
                         its image was built with)",
                    )
                })?;
                Ok(Box::new(SealedUdp::connect(
                    address,
                    read_key(key_file)?,
                    timeout,
                )?))
            }
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
                let port = serialport::new(path, settings.baud)
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
            Target::Udp(address) => write!(f, "udp:{address}"),
            Target::Path(path) => f.write_str(path),
        }
    }
}
