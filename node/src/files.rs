//! The files a user names (models, external data, tensors, cluster keys) and the files vkml
//! writes (outputs): regular files only, read without blocking, written atomically.
//!
//! Opening a FIFO for reading blocks until something writes to it, and a character device
//! such as /dev/zero reads forever: either hangs a command that was only asked to read a
//! file. So files are opened non-blocking and refused unless they are regular files, before
//! a byte is read. Outputs go to a temporary file beside their destination and are renamed
//! over it once complete, so a failure (a full disk, a kill) never leaves a truncated file.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Opens `path` for reading when it is a regular file (symbolic links followed), and fails
/// with [`io::ErrorKind::InvalidInput`] naming its kind otherwise, without blocking on a FIFO.
pub fn open_regular(path: &Path) -> io::Result<File> {
    // O_NONBLOCK makes opening a FIFO return at once; on a regular file it changes nothing.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file (it is {})", kind_name(&kind)),
    ))
}

fn kind_name(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// The whole of a regular file, refusing files larger than `max` bytes (as they are, and as
/// read: a file growing while read is cut off at `max + 1` bytes and refused too).
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    let too_big = |n: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{n} bytes or more, larger than the {max} bytes this file may have"),
        )
    };
    if len > max {
        return Err(too_big(len));
    }
    let mut data = Vec::with_capacity(len as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(too_big(data.len() as u64));
    }
    Ok(data)
}

/// A file being written beside its destination, renamed over it by [`Staged::commit`];
/// removed when dropped uncommitted, so a failed write leaves nothing behind.
pub struct Staged {
    temp: PathBuf,
    dest: PathBuf,
    file: Option<File>,
}

impl Staged {
    /// Creates the temporary file (in `dest`'s folder, so the rename stays on one file system
    /// and is atomic): `.<name>.<pid>.<n>.tmp`, created exclusively.
    pub fn new(dest: &Path) -> io::Result<Staged> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = dest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let dir = dest.parent().unwrap_or(Path::new(""));
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let temp = dir.join(format!(
                ".{}.{}.{n}.tmp",
                name.to_string_lossy(),
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => {
                    return Ok(Staged {
                        temp,
                        dest: dest.to_path_buf(),
                        file: Some(file),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("open until committed")
    }

    /// Flushes the data to disk and renames the file over its destination.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("committed once");
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temp, &self.dest)?;
        // Renamed: nothing left for Drop to remove.
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Writes `path` through `write` atomically: all of it, or (on failure) nothing and the file as
/// it was.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut staged = Staged::new(path)?;
    {
        let mut w = io::BufWriter::new(staged.file());
        write(&mut w)?;
        w.flush()?;
    }
    staged.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vkml-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let d = dir("fifo");
        let fifo = d.join("pipe");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let e = open_regular(&fifo).unwrap_err();
            assert!(e.to_string().contains("a FIFO"), "{e}");
        }
        let e = read_regular(Path::new("/dev/zero"), 64).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let e = open_regular(&d).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let f = d.join("big");
        std::fs::write(&f, [7u8; 100]).unwrap();
        assert!(read_regular(&f, 99).is_err());
        assert_eq!(read_regular(&f, 100).unwrap().len(), 100);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let d = dir("atomic");
        let f = d.join("out.npy");
        std::fs::write(&f, b"old").unwrap();
        let e = write_atomic(&f, |w: &mut dyn Write| {
            w.write_all(b"partial")?;
            Err(io::Error::other("disk full"))
        });
        assert!(e.is_err());
        assert_eq!(std::fs::read(&f).unwrap(), b"old");
        write_atomic(&f, |w: &mut dyn Write| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.npy"], "no temporary file is left");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
