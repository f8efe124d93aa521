use ascii::AsciiString;

use std::io::Error as IoError;
use std::sync::{Arc, Mutex};
use std::io::Result as IoResult;
use std::io::{BufReader, BufWriter, ErrorKind, Read};
use std::time::{Duration, Instant};

use std::net::SocketAddr;
use std::str::FromStr;

use crate::common::{HTTPVersion, Method};
use crate::request::{ConnectionContext, Unread};
use crate::util::refined_tcp_stream::{PeerSocket, ReadDeadline};
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// Longest request or header line accepted (nodeward patch).
const MAX_LINE: usize = 16 * 1024;
/// Most header lines accepted in one request (nodeward patch).
const MAX_HEADERS: usize = 128;

/// nodeward patch: how much of a refused body a connection reads before it closes.
const LINGER_BYTES: usize = 8 * 1024 * 1024;
/// nodeward patch: and for how long at most.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // nodeward patch: set when a request's body was dropped before its end; the bytes that follow
    // on the socket are the rest of that body, not a request: they are skipped (a declared length
    // of at most `max_skip`) or the connection ends.
    unread: Arc<Mutex<Unread>>,
    max_skip: u64,

    // nodeward patch: the deadline of this connection's reads, and how long a request head (with
    // the skipped rest of the previous body) may take in all, counted from the moment the
    // connection waits for it.
    deadline: Arc<ReadDeadline>,
    head_timeout: Option<Duration>,
    peer: Option<PeerSocket>,
    // nodeward patch: whether a byte of the request being read has arrived. A connection that
    // times out idle between requests is closed without an answer: a `408` there could be read
    // by a client as the answer to the request it was about to send on it.
    head_started: bool,

    // true if the connection goes through SSL
    secure: bool,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        head_timeout: Option<Duration>,
        max_skip: u64,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();
        let deadline = read_socket.deadline();
        let peer = read_socket.peer_socket();

        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            unread: Arc::default(),
            max_skip,
            deadline,
            head_timeout,
            peer,
            head_started: false,
            secure,
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    fn read_next_line(&mut self) -> IoResult<AsciiString> {
        let mut buf = Vec::new();
        let mut prev_byte_was_cr = false;

        loop {
            let byte = self.next_header_source.by_ref().bytes().next();

            let byte = match byte {
                Some(b) => b?,
                None => return Err(IoError::new(ErrorKind::ConnectionAborted, "Unexpected EOF")),
            };
            self.head_started = true;

            if byte == b'\n' && prev_byte_was_cr {
                buf.pop(); // removing the '\r'
                return AsciiString::from_ascii(buf)
                    .map_err(|_| IoError::new(ErrorKind::InvalidInput, "Header is not in ASCII"));
            }

            prev_byte_was_cr = byte == b'\r';

            // nodeward patch: upstream grew the line without bound, so a client sending bytes
            // without a line break grew the server's memory until it ran out.
            if buf.len() >= MAX_LINE {
                return Err(IoError::new(ErrorKind::InvalidData, "request line too long"));
            }
            buf.push(byte);
        }
    }

    /// nodeward patch: a lingering close. The client whose body was refused may still be sending
    /// it; closing at once resets the connection under it and it never reads the answer (413).
    /// Read and discard what it sends, at most [`LINGER_BYTES`] and [`LINGER_TIME`], then close.
    fn linger(&mut self) {
        self.deadline.set(Some(Instant::now() + LINGER_TIME));
        let mut left = LINGER_BYTES;
        let mut sink = [0u8; 8192];
        while left > 0 {
            match self.next_header_source.read(&mut sink[..left.min(8192)]) {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n,
            }
        }
    }

    /// nodeward patch: reads and discards the `n` bytes the previous request left of its body,
    /// within the head's deadline, so that the next request on this connection can be read.
    fn skip(&mut self, mut n: u64) -> IoResult<()> {
        let mut sink = [0u8; 8192];
        while n > 0 {
            let want = n.min(sink.len() as u64) as usize;
            match self.next_header_source.read(&mut sink[..want]) {
                Ok(0) => {
                    return Err(IoError::new(
                        ErrorKind::ConnectionAborted,
                        "connection closed inside a request body",
                    ))
                }
                Ok(k) => n -= k as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn take_unread(&self) -> Unread {
        std::mem::take(&mut *self.unread.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // nodeward patch: the whole head must arrive within `head_timeout`.
        self.head_started = false;
        self.deadline
            .set(self.head_timeout.map(|t| Instant::now() + t));
        // nodeward patch: the previous request's body, when it was answered without reading it
        // all: skip its rest when its length is known and small enough, else close.
        match self.take_unread() {
            Unread::Nothing => {}
            Unread::Bytes(n) if n <= self.max_skip => {
                // A client that never sends the rest is closed without an answer.
                self.skip(n).map_err(|e| {
                    ReadError::ReadIoError(IoError::new(ErrorKind::ConnectionAborted, e))
                })?;
            }
            Unread::Bytes(_) | Unread::Unknown => {
                self.linger();
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::ConnectionAborted,
                    "previous request body was not read",
                )));
            }
        }
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line();
                // nodeward patch: the previous body was left unread while this line was awaited
                // (a request handed to another thread); what arrived is not a request.
                if self.take_unread() != Unread::Nothing {
                    self.linger();
                    return Err(ReadError::ReadIoError(IoError::new(
                        ErrorKind::ConnectionAborted,
                        "previous request body was not read",
                    )));
                }
                let line = line.map_err(ReadError::ReadIoError)?;

                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line().map_err(ReadError::ReadIoError)?;

                    if line.is_empty() {
                        break;
                    };
                    // nodeward patch: bound the number of header lines as well as their length.
                    if headers.len() >= MAX_HEADERS {
                        return Err(ReadError::WrongHeader(version));
                    }
                    headers.push(match FromStr::from_str(line.as_str().trim()) {
                        // TODO: remove this conversion
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                headers
            };

            (method, path, version, headers)
        };
        // nodeward patch: the body's deadline is the application's to set.
        self.deadline.set(None);

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            *self.remote_addr.as_ref().unwrap(),
            data_source,
            writer,
            ConnectionContext {
                unread: self.unread.clone(),
                deadline: Some(self.deadline.clone()),
                peer: self.peer.clone(),
            },
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        loop {
            let rq = match self.read() {
                Err(ReadError::WrongRequestLine) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::WrongHeader(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response.raw_print(writer, ver, &[], false, None).ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::ReadIoError(ref err))
                    if err.kind() == ErrorKind::TimedOut && self.head_started =>
                {
                    // request timeout
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(408));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // closing the connection
                }

                Err(ReadError::ExpectationFailed(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(417));
                    response.raw_print(writer, ver, &[], true, None).ok();
                    return None; // TODO: should be recoverable, but needs handling in case of body
                }

                Err(ReadError::ReadIoError(_)) => return None,

                Ok(rq) => rq,
            };

            // checking HTTP version
            if *rq.http_version() > (1, 1) {
                let writer = self.sink.next().unwrap();
                let response = Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505));
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                continue;
            }

            // updating the status of the connection
            let connection_header = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Connection"))
                .map(|h| h.value.as_str());

            let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

            match lowercase {
                Some(ref val) if val.contains("close") => self.no_more_requests = true,
                Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
                Some(ref val)
                    if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
                {
                    self.no_more_requests = true
                }
                None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
                _ => (),
            };

            // returning the request
            return Some(rq);
        }
    }
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }
}
