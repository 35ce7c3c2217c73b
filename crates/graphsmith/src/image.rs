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
    let len = image.len() as u64;
    if image.starts_with(&ELF_MAGIC) {
        // ELF64, little-endian: the section and program header tables must lie in the slice.
        if image.get(4) != Some(&2) || image.get(5) != Some(&1) || image.len() < 64 {
            return Err("an ELF image that is not a complete 64-bit little-endian header".into());
        }
        let ends = [(0x28, 0x3A, 0x3C), (0x20, 0x36, 0x38)].map(|(off, entsize, num)| {
            Some(u64_at(image, off)? + u16_at(image, entsize)? * u16_at(image, num)?)
        });
        return match ends {
            [Some(sections), Some(programs)] if sections <= len && programs <= len => {
                Ok(ImageKind::Cubin)
            }
            _ => Err(format!(
                "a truncated cubin: its ELF headers reach past its {len} bytes"
            )),
        };
    }
    if u32_at(image, 0) == Some(FATBIN_MAGIC as u64) {
        let header = u16_at(image, 6).unwrap_or(0);
        let body = u64_at(image, 8).unwrap_or(u64::MAX);
        return if header >= 16 && header.checked_add(body).is_some_and(|end| end <= len) {
            Ok(ImageKind::Fatbin)
        } else {
            Err(format!(
                "a truncated fatbin: its header says {} bytes, the image has {len}",
                header.saturating_add(body)
            ))
        };
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

    fn fatbin(len: usize, body: u64) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b[6..8].copy_from_slice(&16u16.to_le_bytes());
        b[8..16].copy_from_slice(&body.to_le_bytes());
        b
    }

    #[test]
    fn whole_images_pass_and_truncated_ones_do_not() {
        assert_eq!(classify(&elf(1024, 512, 8)), Ok(ImageKind::Cubin));
        assert!(classify(&elf(1024, 512, 9))
            .unwrap_err()
            .contains("truncated cubin"));
        assert!(classify(&elf(1024, 0, 0)[..40]).is_err());
        assert_eq!(classify(&fatbin(116, 100)), Ok(ImageKind::Fatbin));
        assert!(classify(&fatbin(115, 100))
            .unwrap_err()
            .contains("truncated fatbin"));
        assert!(classify(&fatbin(16, u64::MAX)).is_err());
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
    fn garbage_is_refused_with_a_reason() {
        assert!(classify(b"").unwrap_err().contains("no NUL byte"));
        assert!(classify(b"hello\0").unwrap_err().contains("no `.version`"));
        let noise: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        assert!(classify(&noise).is_err());
    }
}
