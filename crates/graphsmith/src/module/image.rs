//! What kind of module image a byte slice holds, checked before the driver reads it: the driver
//! takes only a pointer and finds the length in the image itself (a cubin's ELF headers, a
//! fatbin's header, PTX's terminating NUL), so a truncated image would make it read past the
//! slice, and with lazy loading (CUDA's default) most other faults surface only when a kernel
//! is first looked up, far from the load.

/// The kinds of image `cuLibraryLoadData` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImageKind {
    Cubin,
    Fatbin,
    Ptx,
}

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// The fatbin data header's magic (`0xBA55ED50`, little-endian).
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as u64)
}
fn u32_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as u64)
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The image's kind, or why it is not one the driver can safely be given.
pub(crate) fn classify(image: &[u8]) -> Result<ImageKind, String> {
    if image.starts_with(&ELF_MAGIC) {
        return check_elf(image).map(|()| ImageKind::Cubin);
    }
    if u32_at(image, 0) == Some(FATBIN_MAGIC as u64) {
        return check_fatbin(image).map(|()| ImageKind::Fatbin);
    }
    let Some(nul) = image.iter().position(|&b| b == 0) else {
        return Err(
            "neither a cubin nor a fatbin, and not NUL-terminated PTX (no NUL byte)".into(),
        );
    };
    let text = &image[..nul];
    let ascii = text
        .iter()
        .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    if ascii && text.windows(8).any(|w| w == b".version") {
        Ok(ImageKind::Ptx)
    } else {
        Err("neither a cubin, a fatbin nor PTX text (no ELF or fatbin magic; no `.version` directive before the first NUL)".into())
    }
}

/// `start + count * size <= len`, without overflow.
fn within(start: u64, count: u64, size: u64, len: u64) -> bool {
    count
        .checked_mul(size)
        .and_then(|bytes| bytes.checked_add(start))
        .is_some_and(|end| end <= len)
}

/// A 64-bit little-endian ELF whose header tables, and every section and segment with file
/// contents, lie inside the image.
fn check_elf(image: &[u8]) -> Result<(), String> {
    let len = image.len() as u64;
    let truncated = || {
        format!("a truncated or malformed cubin ({len} bytes): its ELF headers reach past its end")
    };
    if image.get(4) != Some(&2) || image.get(5) != Some(&1) || image.len() < 64 {
        return Err("an ELF image that is not a complete 64-bit little-endian header".into());
    }
    let field = |at, size| match size {
        2 => u16_at(image, at),
        4 => u32_at(image, at),
        _ => u64_at(image, at),
    };
    // The section and program header tables: offset, entry size, entry count.
    let (shoff, shentsize, shnum) = (field(0x28, 8), field(0x3A, 2), field(0x3C, 2));
    let (phoff, phentsize, phnum) = (field(0x20, 8), field(0x36, 2), field(0x38, 2));
    let (Some(shoff), Some(shentsize), Some(shnum), Some(phoff), Some(phentsize), Some(phnum)) =
        (shoff, shentsize, shnum, phoff, phentsize, phnum)
    else {
        return Err(truncated());
    };
    // Extended numbering (shnum 0 with a table) is not something a cubin uses.
    if (shnum == 0 && shoff != 0)
        || (shnum > 0 && shentsize != 64)
        || (phnum > 0 && phentsize != 56)
    {
        return Err(truncated());
    }
    if !within(shoff, shnum, 64, len) || !within(phoff, phnum, 56, len) {
        return Err(truncated());
    }
    const SHT_NOBITS: u64 = 8;
    for i in 0..shnum {
        let at = (shoff + i * 64) as usize;
        let (kind, offset, size) = (field(at + 4, 4), field(at + 0x18, 8), field(at + 0x20, 8));
        match (kind, offset, size) {
            (Some(SHT_NOBITS), _, _) => {}
            (Some(_), Some(offset), Some(size)) if within(offset, 1, size, len) => {}
            _ => return Err(truncated()),
        }
    }
    for i in 0..phnum {
        let at = (phoff + i * 56) as usize;
        match (field(at + 0x08, 8), field(at + 0x20, 8)) {
            (Some(offset), Some(size)) if within(offset, 1, size, len) => {}
            _ => return Err(truncated()),
        }
    }
    Ok(())
}

/// A fatbin whose header and every entry (header and payload) lie inside the image.
fn check_fatbin(image: &[u8]) -> Result<(), String> {
    let len = image.len() as u64;
    let header = u16_at(image, 6).unwrap_or(0);
    let body = u64_at(image, 8).unwrap_or(u64::MAX);
    let Some(end) = header
        .checked_add(body)
        .filter(|&end| header >= 16 && end <= len)
    else {
        return Err(format!(
            "a truncated fatbin: its header says {} bytes, the image has {len}",
            header.saturating_add(body)
        ));
    };
    let mut at = header;
    while at < end {
        let entry_header = u32_at(image, at as usize + 4);
        let payload = u64_at(image, at as usize + 8);
        let next = match (entry_header, payload) {
            (Some(h), Some(p)) if h >= 16 => h.checked_add(p).and_then(|n| n.checked_add(at)),
            _ => None,
        };
        match next {
            Some(next) if next <= end => at = next,
            _ => {
                return Err(format!(
                    "a malformed fatbin: entry at byte {at} reaches past its end"
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(len: usize, shoff: u64, shnum: u16) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(&ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&shnum.to_le_bytes());
        b
    }

    /// A fatbin of `len` bytes whose header says `body` bytes follow, holding one entry (a
    /// 16-byte entry header and `body - 16` bytes of payload) when `body >= 16`.
    fn fatbin(len: usize, body: u64) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b[6..8].copy_from_slice(&16u16.to_le_bytes());
        b[8..16].copy_from_slice(&body.to_le_bytes());
        if body >= 16 && len >= 32 {
            b[20..24].copy_from_slice(&16u32.to_le_bytes());
            b[24..32].copy_from_slice(&(body - 16).to_le_bytes());
        }
        b
    }

    #[test]
    fn whole_images_pass_and_truncated_ones_do_not() {
        assert_eq!(classify(&elf(1024, 512, 8)), Ok(ImageKind::Cubin));
        assert!(classify(&elf(1024, 512, 9))
            .unwrap_err()
            .contains("malformed cubin"));
        assert!(classify(&elf(1024, 0, 0)[..40]).is_err());
        assert_eq!(classify(&fatbin(116, 100)), Ok(ImageKind::Fatbin));
        assert!(classify(&fatbin(115, 100))
            .unwrap_err()
            .contains("truncated fatbin"));
        assert!(classify(&fatbin(16, u64::MAX)).is_err());
        // An entry whose payload reaches past the body.
        let mut long_entry = fatbin(116, 100);
        long_entry[24..32].copy_from_slice(&200u64.to_le_bytes());
        assert!(classify(&long_entry)
            .unwrap_err()
            .contains("malformed fatbin"));
        let ptx = b"//\n.version 9.0\n.target sm_90\n\0";
        assert_eq!(classify(ptx), Ok(ImageKind::Ptx));
        assert_eq!(
            classify(crate::BUILTIN_PTX.as_bytes()).ok(),
            None,
            "no NUL: refused"
        );
        let mut builtin = crate::BUILTIN_PTX.as_bytes().to_vec();
        builtin.push(0);
        assert_eq!(classify(&builtin), Ok(ImageKind::Ptx));
    }

    #[test]
    fn elf_fields_that_overflow_or_lie_are_refused() {
        // A table offset that wraps around when the table's size is added.
        assert!(classify(&elf(1024, u64::MAX - 10, 1)).is_err());
        // An entry size other than ELF64's (the driver would read 64-byte entries).
        let mut b = elf(1024, 512, 8);
        b[0x3A..0x3C].copy_from_slice(&0u16.to_le_bytes());
        assert!(classify(&b).is_err());
        // A section whose contents lie past the end.
        let mut b = elf(1024, 512, 8);
        let section = 512 + 64;
        b[section + 4] = 1; // SHT_PROGBITS
        b[section + 0x18..section + 0x20].copy_from_slice(&1000u64.to_le_bytes());
        b[section + 0x20..section + 0x28].copy_from_slice(&100u64.to_le_bytes());
        assert!(classify(&b).is_err());
        // The same section holding no file data (SHT_NOBITS) is fine.
        b[section + 4] = 8;
        assert_eq!(classify(&b), Ok(ImageKind::Cubin));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(classify(b"").unwrap_err().contains("no NUL byte"));
        assert!(classify(b"hello\0").unwrap_err().contains("no `.version`"));
        let noise: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        assert!(classify(&noise).is_err());
    }
}
