//! Which catalogue entry a raw CUDA call that failed matches, by the call's name (runtime or
//! driver API: `cudaStreamSynchronize`, `cuMemAlloc_v2`) and its code. `graphsmith trace` uses
//! it for calls made by any program; graphsmith's own operations go through
//! [`super::classify`].

use super::{entry, Entry};

fn is_sync(call: &str) -> bool {
    ["Synchronize", "StreamQuery", "DeviceSynchronize"]
        .iter()
        .any(|s| call.contains(s))
        && !call.contains("Event")
}

fn is_alloc(call: &str) -> bool {
    let c = call.to_ascii_lowercase();
    (c.contains("malloc") || c.contains("memalloc") || c.contains("free")) && !c.contains("async")
}

/// The entry a raw CUDA call returning `code` matches, when the code is a capture code.
///
/// ```
/// use graphsmith_analysis::catalogue::classify_call;
/// assert_eq!(classify_call("cudaStreamSynchronize", 900).unwrap().id, "sync-in-capture");
/// assert_eq!(classify_call("cuMemAlloc_v2", 900).unwrap().id, "alloc-in-capture");
/// assert!(classify_call("cudaMemcpy", 1).is_none());
/// ```
pub fn classify_call(call: &str, code: u32) -> Option<&'static Entry> {
    let id = match code {
        900 if call.contains("BeginCapture") => "begin-on-legacy",
        900 if is_alloc(call) => "alloc-in-capture",
        900 if is_sync(call) => "sync-in-capture",
        900 | 901 => "invalidated-outside",
        902 => "merge",
        903 => "unmatched-end",
        904 => "unjoined-fork",
        905 => "isolation",
        906 => "legacy-implicit",
        907 => "captured-event-wait",
        908 => "end-wrong-thread",
        _ => return None,
    };
    entry(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_and_alloc_are_told_apart() {
        let id = |call: &str, code: u32| classify_call(call, code).map(|e| e.id);
        assert_eq!(id("cudaStreamSynchronize", 900), Some("sync-in-capture"));
        assert_eq!(id("cudaMalloc", 900), Some("alloc-in-capture"));
        assert_eq!(id("cuMemAlloc_v2", 900), Some("alloc-in-capture"));
        assert_eq!(id("cudaEventSynchronize", 907), Some("captured-event-wait"));
        assert_eq!(id("cudaStreamBeginCapture", 900), Some("begin-on-legacy"));
        assert_eq!(id("cudaMemcpy", 1), None);
        for code in 900..=908 {
            assert!(id("cudaLaunchKernel", code).is_some(), "{code}");
        }
    }
}
