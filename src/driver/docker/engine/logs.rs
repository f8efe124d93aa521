//! A container's log stream: the demuxer of the engine's multiplexed format, the
//! [`LogStream`] that yields its frames, and the engine's timestamps.
//!
//! A container created without a TTY (the driver's are) has its output multiplexed: each frame is
//! an 8-byte header — the stream (1 stdout, 2 stderr; 0 stdin, read as stdout), three zero bytes,
//! the payload's length as a big-endian u32 — then the payload. Frames do not follow the HTTP
//! chunks: a header or a payload may be split across reads, which [`Demuxer`] reassembles.
//!
//! What the engine does with them (Docker 20.10, API 1.41, `json-file` logging; measured, see
//! `tests/docker_engine.rs`) is written down in the module doc of [`super`].

use std::fmt;

use super::http::Body;
use super::EngineError;

/// Which output a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One frame of the stream. With `timestamps=1` (what [`super::Engine::logs`] asks for) the
/// payload starts with the time the engine read it and a space: [`Frame::timestamp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub stream: Stream,
    pub data: Vec<u8>,
}

impl Frame {
    /// The frame's timestamp (nanoseconds since the Unix epoch) and the bytes after it; `None`
    /// when the payload does not start with one.
    pub fn timestamp(&self) -> Option<(i64, &[u8])> {
        let space = self.data.iter().position(|&b| b == b' ')?;
        let stamp = std::str::from_utf8(&self.data[..space]).ok()?;
        let nanos = parse_time(stamp).ok()??;
        Some((nanos, &self.data[space + 1..]))
    }
}

/// A frame header claiming more than this is not the multiplexed format (the engine cuts lines
/// at 16 KiB): better a clear error than a huge allocation.
const MAX_FRAME: usize = 1 << 20;

/// Reassembles frames from the bytes of the stream, however they were split.
#[derive(Debug, Default)]
pub struct Demuxer {
    pending: Vec<u8>,
}

impl Demuxer {
    pub fn new() -> Demuxer {
        Demuxer::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole frame, `Ok(None)` until one has arrived whole. Stream 3 (the engine's own
    /// error, as it sends on a failed attach) is an `Err` with its text.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DemuxError> {
        if self.pending.len() < 8 {
            return Ok(None);
        }
        let header: [u8; 8] = self.pending[..8].try_into().unwrap_or_default();
        let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let stream = match header[0] {
            0 | 1 => Stream::Stdout,
            2 => Stream::Stderr,
            3 => {
                if self.pending.len() < 8 + len.min(MAX_FRAME) {
                    return Ok(None);
                }
                let end = 8 + len.min(MAX_FRAME);
                let text = String::from_utf8_lossy(&self.pending[8..end])
                    .trim()
                    .to_string();
                return Err(DemuxError::Engine(text));
            }
            _ => return Err(bad_header(&header)),
        };
        if header[1..4] != [0, 0, 0] || len > MAX_FRAME {
            return Err(bad_header(&header));
        }
        if self.pending.len() < 8 + len {
            return Ok(None);
        }
        let data = self.pending[8..8 + len].to_vec();
        self.pending.drain(..8 + len);
        Ok(Some(Frame { stream, data }))
    }

    /// Bytes of a frame that has not arrived whole (what is lost if the stream ends now).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

fn bad_header(header: &[u8; 8]) -> DemuxError {
    DemuxError::BadHeader(format!("not a log frame header: {header:02x?}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemuxError {
    BadHeader(String),
    Engine(String),
}

impl fmt::Display for DemuxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemuxError::BadHeader(text) | DemuxError::Engine(text) => f.write_str(text),
        }
    }
}

/// A followed log: frames as the engine sends them, until the container has exited and its last
/// line is out (`Ok(None)`), the stream's [`super::Closer`] is closed ([`EngineError::Cancelled`]),
/// or the connection fails.
pub struct LogStream {
    body: Body,
    demux: Demuxer,
    buf: Vec<u8>,
    ended: bool,
}

impl LogStream {
    pub(super) fn new(body: Body) -> LogStream {
        LogStream {
            body,
            demux: Demuxer::new(),
            buf: vec![0; 32 << 10],
            ended: false,
        }
    }

    /// Blocks until the next frame; `Ok(None)` at the end of the stream.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, EngineError> {
        loop {
            match self.demux.next_frame() {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(DemuxError::Engine(message)) => {
                    return Err(EngineError::Engine {
                        call: self.body.what().to_string(),
                        status: 200,
                        message,
                    })
                }
                Err(e @ DemuxError::BadHeader(_)) => return Err(self.body.bad(e)),
            }
            if self.ended {
                return match self.demux.pending() {
                    0 => Ok(None),
                    n => Err(self
                        .body
                        .bad(format!("the stream ended inside a frame ({n} bytes)"))),
                };
            }
            let n = self.body.read_some(&mut self.buf)?;
            if n == 0 {
                self.ended = true;
            }
            self.demux.push(&self.buf[..n]);
        }
    }
}

impl Iterator for LogStream {
    type Item = Result<Frame, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame().transpose()
    }
}

/// The engine's `since` parameter for a time in nanoseconds since the epoch: `secs.nanos` with
/// nine digits, which the engine compares to each line's time at full resolution.
pub fn since_param(nanos: i64) -> String {
    format!(
        "{}.{:09}",
        nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000)
    )
}

/// An engine time (RFC 3339 with up to nine fraction digits) in nanoseconds since the Unix
/// epoch. The empty string and Go's zero time (`0001-01-01T00:00:00Z`, what the engine writes for
/// "never") are `None`.
pub fn parse_time(text: &str) -> Result<Option<i64>, String> {
    if text.is_empty() || text.starts_with("0001-01-01T") {
        return Ok(None);
    }
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("bad time {text:?}: {e}"))?;
    t.timestamp_nanos_opt()
        .map(Some)
        .ok_or_else(|| format!("time {text:?} out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![stream, 0, 0, 0];
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn frames_are_reassembled_at_every_split() {
        let mut wire = frame(1, b"out\n");
        wire.extend(frame(2, b"err\n"));
        wire.extend(frame(1, b""));
        wire.extend(frame(1, &[b'x'; 300]));
        let want = vec![
            Frame {
                stream: Stream::Stdout,
                data: b"out\n".to_vec(),
            },
            Frame {
                stream: Stream::Stderr,
                data: b"err\n".to_vec(),
            },
            Frame {
                stream: Stream::Stdout,
                data: vec![],
            },
            Frame {
                stream: Stream::Stdout,
                data: vec![b'x'; 300],
            },
        ];
        // Every split point, and byte by byte.
        for cut in 0..=wire.len() {
            let mut d = Demuxer::new();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                d.push(part);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, want, "cut at {cut}");
            assert_eq!(d.pending(), 0);
        }
        let mut d = Demuxer::new();
        let mut got = Vec::new();
        for b in &wire {
            d.push(std::slice::from_ref(b));
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn a_bad_header_and_the_engine_stream_are_errors() {
        let mut d = Demuxer::new();
        d.push(b"HTTP/1.1 200 OK\r\n");
        assert!(matches!(d.next_frame(), Err(DemuxError::BadHeader(_))));
        let mut d = Demuxer::new();
        d.push(&frame(3, b"container not found\n"));
        assert_eq!(
            d.next_frame(),
            Err(DemuxError::Engine("container not found".into()))
        );
        let mut d = Demuxer::new();
        d.push(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_frame(), Err(DemuxError::BadHeader(_))));
    }

    #[test]
    fn timestamps_and_since() {
        let f = Frame {
            stream: Stream::Stdout,
            data: b"2026-12-01T16:01:08.405325642Z line3\n".to_vec(),
        };
        assert_eq!(
            f.timestamp(),
            Some((1_796_140_868_405_325_642, &b"line3\n"[..]))
        );
        let plain = Frame {
            stream: Stream::Stdout,
            data: b"line3\n".to_vec(),
        };
        assert_eq!(plain.timestamp(), None);
        assert_eq!(
            since_param(1_796_140_868_405_325_642),
            "1796140868.405325642"
        );
        assert_eq!(
            since_param(1_796_140_868_000_000_007),
            "1796140868.000000007"
        );
        assert_eq!(
            parse_time("2026-12-01T16:01:09.6218798Z"),
            Ok(Some(1_796_140_869_621_879_800))
        );
        assert_eq!(
            parse_time("2026-12-01T17:01:09+01:00"),
            Ok(Some(1_796_140_869_000_000_000))
        );
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), Ok(None));
        assert_eq!(parse_time(""), Ok(None));
        assert!(parse_time("yesterday").is_err());
    }
}
