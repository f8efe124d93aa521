//! Task log files: `alloc/logs/<task>.stdout.N` and `.stderr.N`, rotated at `max_file_size`,
//! keeping the newest `max_files`, the way Nomad's logmon names them.
//!
//! A [`RotatingFile`] appends to the highest-numbered file and moves to the next index when the
//! current one would pass the size limit; files that fall out of the window are removed. A restart
//! of the task continues the newest file, so `alloc logs` shows one continuous stream.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `stdout` or `stderr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The log files of one stream of one task, oldest first, with their indices.
pub fn log_files(dir: &Path, task: &str, stream: Stream) -> Vec<(u64, PathBuf)> {
    let prefix = format!("{task}.{}.", stream.as_str());
    let mut files: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let index = name.strip_prefix(&prefix)?.parse::<u64>().ok()?;
            Some((index, e.path()))
        })
        .collect();
    files.sort();
    files
}

pub struct RotatingFile {
    dir: PathBuf,
    prefix: String,
    max_size: u64,
    max_files: u64,
    index: u64,
    size: u64,
    file: Option<File>,
}

impl RotatingFile {
    pub fn open(
        dir: &Path,
        task: &str,
        stream: Stream,
        max_files: u32,
        max_file_size_mb: u32,
    ) -> RotatingFile {
        let existing = log_files(dir, task, stream);
        let (index, size) = existing
            .last()
            .map(|(i, p)| (*i, fs::metadata(p).map(|m| m.len()).unwrap_or(0)))
            .unwrap_or((0, 0));
        RotatingFile {
            dir: dir.to_path_buf(),
            prefix: format!("{task}.{}.", stream.as_str()),
            max_size: u64::from(max_file_size_mb.max(1)) * 1024 * 1024,
            max_files: u64::from(max_files.max(1)),
            index,
            size,
            file: None,
        }
    }

    fn path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{}{index}", self.prefix))
    }

    fn current(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o640)
                .open(self.path(self.index))?;
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    fn rotate(&mut self) {
        self.file = None;
        self.index += 1;
        self.size = 0;
        if self.index >= self.max_files {
            let oldest_kept = self.index + 1 - self.max_files;
            for (i, p) in log_files(&self.dir, self.prefix_task(), self.stream()) {
                if i < oldest_kept {
                    let _ = fs::remove_file(p);
                }
            }
        }
    }

    fn prefix_task(&self) -> &str {
        self.prefix
            .trim_end_matches('.')
            .rsplit_once('.')
            .map(|(t, _)| t)
            .unwrap_or("")
    }

    fn stream(&self) -> Stream {
        if self.prefix.ends_with(".stderr.") {
            Stream::Stderr
        } else {
            Stream::Stdout
        }
    }

    /// Appends `data`, splitting it across files at the size limit.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            if self.size >= self.max_size {
                self.rotate();
            }
            let room = (self.max_size - self.size) as usize;
            let n = room.min(data.len());
            self.current()?.write_all(&data[..n])?;
            self.size += n as u64;
            data = &data[n..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_and_keeps_max_files() {
        let dir = std::env::temp_dir().join(format!(
            "nodeward-logs-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        fs::create_dir_all(&dir).unwrap();
        let mut f = RotatingFile::open(&dir, "web", Stream::Stdout, 3, 1);
        let chunk = vec![b'x'; 700 * 1024];
        for _ in 0..10 {
            f.write(&chunk).unwrap();
        }
        let files = log_files(&dir, "web", Stream::Stdout);
        let indices: Vec<u64> = files.iter().map(|(i, _)| *i).collect();
        // 7000 KiB over 1 MiB files is 7 files (0..=6); the newest 3 stay.
        assert_eq!(indices, vec![4, 5, 6]);
        for (i, p) in &files[..2] {
            assert_eq!(fs::metadata(p).unwrap().len(), 1024 * 1024, "file {i}");
        }
        // A new writer (a restarted task) continues the newest file.
        let mut again = RotatingFile::open(&dir, "web", Stream::Stdout, 3, 1);
        again.write(b"more").unwrap();
        assert_eq!(log_files(&dir, "web", Stream::Stdout).last().unwrap().0, 6);
        assert!(log_files(&dir, "web", Stream::Stderr).is_empty());
    }
}
