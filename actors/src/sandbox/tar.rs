//! Just enough of the tar format to move one regular file in and out of a container through
//! the Engine API's archive endpoints (ustar headers, 512-byte blocks).

const BLOCK: usize = 512;

/// An archive holding one file called `name` with `bytes` as its contents.
pub fn single_file(name: &str, bytes: &[u8], mode: u32) -> Result<Vec<u8>, String> {
    if name.len() > 100 || name.is_empty() || name.contains('/') {
        return Err(format!("cannot archive a file named `{name}`"));
    }
    let mut header = [0u8; BLOCK];
    header[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut header[100..108], mode as u64);
    octal(&mut header[108..116], 0); // uid
    octal(&mut header[116..124], 0); // gid
    octal(&mut header[124..136], bytes.len() as u64);
    octal(&mut header[136..148], 0); // mtime
    header[156] = b'0'; // regular file
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field read as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u64 = header.iter().map(|b| *b as u64).sum();
    let field = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(field.as_bytes());

    let mut out = Vec::with_capacity(BLOCK * 3 + bytes.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(bytes);
    out.resize(out.len().next_multiple_of(BLOCK), 0);
    out.extend_from_slice(&[0u8; BLOCK * 2]);
    Ok(out)
}

fn octal(field: &mut [u8], value: u64) {
    let digits = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(digits.as_bytes());
}

/// The contents of the first regular file in an archive; an error names what was found
/// instead (a directory, a link, nothing).
pub fn first_file(archive: &[u8]) -> Result<Vec<u8>, String> {
    let mut at = 0;
    while at + BLOCK <= archive.len() {
        let header = &archive[at..at + BLOCK];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let size = parse_octal(&header[124..136]).ok_or("a malformed tar header")? as usize;
        let kind = header[156];
        let start = at + BLOCK;
        match kind {
            b'0' | 0 => {
                let end = start + size;
                return archive
                    .get(start..end)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| "a truncated archive".to_string());
            }
            b'5' => return Err("that path is a directory".into()),
            b'1' | b'2' => return Err("that path is a link".into()),
            // Extended headers (pax, GNU long names) precede the entry they describe.
            _ => at = start + size.next_multiple_of(BLOCK),
        }
    }
    Err("the archive holds no file".into())
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if digits.is_empty() {
        Some(0)
    } else {
        u64::from_str_radix(digits, 8).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_file_round_trips() {
        let archive = single_file("notes.txt", b"hello\nworld\n", 0o644).unwrap();
        assert_eq!(archive.len() % BLOCK, 0);
        assert_eq!(first_file(&archive).unwrap(), b"hello\nworld\n");
        assert!(single_file("a/b", b"", 0o644).is_err());
        assert!(first_file(&[0u8; 1024]).is_err());
    }

    #[test]
    fn the_system_tar_reads_our_archives() {
        let dir = std::env::temp_dir().join(format!("manus-tar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let archive = dir.join("one.tar");
        std::fs::write(
            &archive,
            single_file("data.csv", b"a,b\n1,2\n", 0o644).unwrap(),
        )
        .unwrap();
        let listed = std::process::Command::new("tar")
            .arg("-xOf")
            .arg(&archive)
            .output()
            .unwrap();
        assert!(
            listed.status.success(),
            "{}",
            String::from_utf8_lossy(&listed.stderr)
        );
        assert_eq!(listed.stdout, b"a,b\n1,2\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
