use std::io::Result as IoResult;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::connection::Connection;
#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use crate::ssl::SslStream;

pub(crate) enum Stream {
    // nodeward patch: both halves share one socket instead of a `try_clone` each. Upstream's clone
    // unwrapped `dup(2)`, so a process out of file descriptors (EMFILE) panicked the accept
    // thread, and every connection used two descriptors instead of one.
    Http(Arc<Connection>),
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    Https(SslStream),
}

impl Clone for Stream {
    fn clone(&self) -> Self {
        match self {
            Stream::Http(conn) => Stream::Http(conn.clone()),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => Stream::Https(ssl_stream.clone()),
        }
    }
}

impl From<Connection> for Stream {
    fn from(tcp_stream: Connection) -> Self {
        Stream::Http(Arc::new(tcp_stream))
    }
}

impl Stream {
    fn secure(&self) -> bool {
        match self {
            Stream::Http(_) => false,
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => true,
        }
    }

    fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        match self {
            Stream::Http(conn) => conn.peer_addr(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.peer_addr(),
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(conn) => conn.shutdown(how),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.shutdown(how),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> IoResult<()> {
        match self {
            Stream::Http(conn) => conn.set_read_timeout(timeout),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => Ok(()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(conn) => (&**conn).read(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(conn) => (&**conn).write(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(conn) => (&**conn).flush(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.flush(),
        }
    }
}

/// nodeward patch: a deadline for the reads of one connection, shared by the reader of request
/// heads and the reader of the body. A socket's read timeout bounds each `read` call, so a client
/// sending one byte just before each timeout kept a head or a body open for as long as it liked.
/// With a deadline set, every read is bounded by what is left of it, and a read after it fails
/// with `TimedOut`.
#[derive(Debug, Default)]
pub struct ReadDeadline {
    at: Mutex<Option<Instant>>,
}

impl ReadDeadline {
    /// Sets (`Some`) or clears (`None`) the deadline of the connection's next reads.
    pub fn set(&self, at: Option<Instant>) {
        *self.at.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    fn get(&self) -> Option<Instant> {
        *self.at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// nodeward patch: a handle on a connection's socket, which stays open while the handle lives:
/// the application can poll it (has the client gone away?) while it streams an answer.
#[derive(Clone)]
pub struct PeerSocket(Arc<Connection>);

#[cfg(unix)]
impl std::os::unix::io::AsRawFd for PeerSocket {
    fn as_raw_fd(&self) -> std::os::unix::io::RawFd {
        self.0.as_raw_fd()
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    // nodeward patch: the read half's deadline, the socket's own read timeout, and the timeout
    // last set on the socket (set again only when it changes).
    deadline: Arc<ReadDeadline>,
    io_timeout: Option<Duration>,
    timeout_set: Option<Option<Duration>>,
}

impl RefinedTcpStream {
    /// The read and the write half of one connection; `io_timeout` is the socket's read timeout
    /// when no deadline is set.
    pub(crate) fn new<S>(stream: S, io_timeout: Option<Duration>) -> (RefinedTcpStream, RefinedTcpStream)
    where
        S: Into<Stream>,
    {
        let stream: Stream = stream.into();

        let (read, write) = (stream.clone(), stream);
        let deadline = Arc::new(ReadDeadline::default());

        let read = RefinedTcpStream {
            stream: read,
            close_read: true,
            close_write: false,
            deadline: deadline.clone(),
            io_timeout,
            timeout_set: None,
        };

        let write = RefinedTcpStream {
            stream: write,
            close_read: false,
            close_write: true,
            deadline,
            io_timeout,
            timeout_set: None,
        };

        (read, write)
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }

    pub(crate) fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        self.stream.peer_addr()
    }

    /// The deadline that bounds this connection's reads (nodeward patch).
    pub(crate) fn deadline(&self) -> Arc<ReadDeadline> {
        self.deadline.clone()
    }

    /// A handle on the socket, for plain TCP and unix connections (nodeward patch).
    pub(crate) fn peer_socket(&self) -> Option<PeerSocket> {
        match &self.stream {
            Stream::Http(conn) => Some(PeerSocket(conn.clone())),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => None,
        }
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        // nodeward patch: bound this read by the connection's deadline.
        let deadline = self.deadline.get();
        let timeout = match deadline {
            None => self.io_timeout,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "read deadline passed",
                    ));
                }
                Some(self.io_timeout.map_or(left, |io| io.min(left)))
            }
        };
        if self.timeout_set != Some(timeout) {
            self.stream.set_read_timeout(timeout)?;
            self.timeout_set = Some(timeout);
        }
        match self.stream.read(buf) {
            // The socket's timeout reads as `WouldBlock`; past the deadline it is the deadline.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && deadline.is_some_and(|at| Instant::now() >= at) =>
            {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "read deadline passed",
                ))
            }
            other => other,
        }
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
