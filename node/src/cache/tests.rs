use super::*;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vkml-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn blob(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_blob_comes_back_by_its_hash_and_survives_a_restart() {
    let d = temp_dir("restart");
    let c = WeightCache::open(&d, 1 << 20).unwrap();
    let a = blob(1, 1000);
    let id = c.put(&a).unwrap();
    assert_eq!(id, BlobId::of(&a));
    assert_eq!(id.hex().len(), 64);
    assert_eq!(BlobId::parse(&id.hex()), Some(id));
    assert_eq!(c.get(&id).as_deref(), Some(&a[..]));
    assert_eq!(c.size(), 1000);
    assert_eq!(c.stats().hits, 1);
    assert_eq!(c.stats().stored_bytes, 1000);
    // Storing it again stores nothing.
    c.put(&a).unwrap();
    assert_eq!(c.stats().stored, 1);
    drop(c);
    let c = WeightCache::open(&d, 1 << 20).unwrap();
    assert!(c.contains(&id));
    assert_eq!(c.get(&id).as_deref(), Some(&a[..]));
    assert!(c.get(&BlobId::of(b"something else")).is_none());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_least_recently_used_blob_goes_first_and_the_bound_holds() {
    let d = temp_dir("lru");
    let c = WeightCache::open(&d, 250).unwrap();
    let (a, b, x) = (blob(1, 100), blob(2, 100), blob(3, 100));
    let ia = c.put(&a).unwrap();
    let ib = c.put(&b).unwrap();
    assert!(c.get(&ia).is_some(), "a used after b");
    let ix = c.put(&x).unwrap();
    assert!(c.contains(&ia) && c.contains(&ix));
    assert!(!c.contains(&ib), "b was the least recently used");
    assert!(!d.join(ib.hex()).exists(), "its file is gone");
    assert_eq!(c.size(), 200);
    assert_eq!(c.stats().evicted, 1);
    // Larger than the whole bound: not kept, nothing evicted.
    let big = blob(4, 300);
    let ibig = c.put(&big).unwrap();
    assert!(!c.contains(&ibig));
    assert_eq!(c.size(), 200);
    // Reopened with a smaller bound: the older of the two (by file time) goes.
    drop(c);
    std::fs::File::options()
        .append(true)
        .open(d.join(ia.hex()))
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1))
        .unwrap();
    let c = WeightCache::open(&d, 150).unwrap();
    assert!(!c.contains(&ia) && c.contains(&ix));
    assert!(c.size() <= 150);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_damaged_blob_is_a_miss_and_leftovers_are_cleaned() {
    let d = temp_dir("damaged");
    let c = WeightCache::open(&d, 1 << 20).unwrap();
    let a = blob(5, 500);
    let id = c.put(&a).unwrap();
    std::fs::write(d.join(id.hex()), b"not the same bytes").unwrap();
    assert!(c.get(&id).is_none());
    assert!(!c.contains(&id), "forgotten");
    assert!(!d.join(id.hex()).exists(), "removed");
    // An interrupted write's temporary file and a stranger's file.
    std::fs::write(d.join(".partial-1-abc"), b"half").unwrap();
    std::fs::write(d.join("README"), b"mine").unwrap();
    drop(c);
    let c = WeightCache::open(&d, 1 << 20).unwrap();
    assert!(!d.join(".partial-1-abc").exists());
    assert!(d.join("README").exists(), "not ours to remove");
    assert_eq!(c.size(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unusable_folder_is_an_error_naming_it() {
    let d = temp_dir("unusable");
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let Err(e) = WeightCache::open(&file.join("cache"), 1 << 20) else {
        panic!("a folder under a file opened");
    };
    let m = e.to_string();
    assert!(
        m.contains("a-file/cache") && m.contains("--cache-dir"),
        "{m}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A disk that fills while a blob is written (here: its temporary file is /dev/full, where
/// every write fails with ENOSPC) is an error naming the file, and nothing is kept.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_an_error_naming_the_file_and_keeps_nothing() {
    let d = temp_dir("full");
    let c = WeightCache::open(&d, 1 << 30).unwrap();
    let data = blob(5, 3 << 20);
    let id = BlobId::of(&data);
    let temp = d.join(format!("{TEMP_PREFIX}{}-{}", std::process::id(), id.hex()));
    std::os::unix::fs::symlink("/dev/full", &temp).unwrap();
    let mut w = c.begin(id, data.len() as u64).unwrap();
    let failed = data
        .chunks(1 << 20)
        .map(|piece| w.write(piece))
        .find_map(Result::err)
        .or_else(|| c.finish(w).err());
    let m = failed.expect("writing to a full disk fails").to_string();
    assert!(
        m.contains(&*d.to_string_lossy()) && m.contains("disk full"),
        "the error names the file and says why: {m}"
    );
    assert!(!c.contains(&id), "nothing is kept");
    assert!(!d.join(id.hex()).exists(), "no blob under its name");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_default_folder_follows_xdg_then_home() {
    let xdg = Path::new("/x/cache");
    let home = Path::new("/home/u");
    assert_eq!(
        default_dir(Some(xdg), Some(home)).unwrap(),
        Path::new("/x/cache/vkml/weights")
    );
    assert_eq!(
        default_dir(Some(Path::new("relative")), Some(home)).unwrap(),
        Path::new("/home/u/.cache/vkml/weights")
    );
    assert_eq!(default_dir(None, None), None);
}
