//! Launch choices set by hand in place of the rules' (`graphsmith-llama bench --tune SPEC`):
//! the warps per output column of each one-row projection, the projections' blocks per
//! multiprocessor, a cap on the attention's splits, whether it runs as thread block clusters,
//! how many bytes of the next weights it asks L2 for (`step::prefetch`), which one-row
//! projections run on the ring GEMV (`kernels::launch::gemv_async`) and on how many blocks, and
//! whether a step of a few rows runs the GEMV kernels or cuBLAS: what the search per shape
//! (`step::search`) tunes per bucket. They change how the work is spread over the
//! GPU, and with it the order in which a dot product's or a softmax's pieces are added: results
//! may differ from the rules' by rounding, and must pass the same checks
//! (`tests/gpu_decode.rs` runs the host-reference check with two extreme choices).

use std::fmt;
use std::str::FromStr;

/// The one-row projections, in the order of [`Tuning::warps_per_column`].
pub const PROJECTIONS: [&str; 5] = ["qkv", "o", "gate_up", "down", "head"];

/// Hand-set launch choices; `None` everywhere (the default) is the rules' choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Warps per output column of q/k/v, o, gate/up, down and lm_head (1, 2, 4 or 8; the rules
    /// are `kernels::geometry::QKV_WARPS_PER_COLUMN` for q/k/v and
    /// `kernels::geometry::warps_per_column` for the others).
    pub warps_per_column: [Option<usize>; 5],
    /// At most this many blocks share one row's positions in the attention (the rule,
    /// `kernels::geometry::attention_splits`, sized the buffers, so a cap above it changes nothing).
    pub attention_splits: Option<usize>,
    /// At most this many resident blocks of a one-row projection per multiprocessor (1 to 4;
    /// the rule takes as many as fit, up to 4). Fewer leave room for the next kernel's blocks
    /// to start and load their weights while this one runs.
    pub gemv_blocks_per_sm: Option<u32>,
    /// MiB of the next kernels' weights the attention asks L2 for at one row
    /// (`step::prefetch`; the rule: `PREFETCH_MIB_RULE`; 0: none).
    pub prefetch_mib: Option<u64>,
    /// Whether the attention runs as one thread block cluster per (row, key/value head),
    /// combining in distributed shared memory (`kernels::geometry::AttentionLaunch`, for groups of up to
    /// 4 and head_dim up to 128; the rule: at one row and short contexts, see
    /// `AttentionLaunch::for_rows`).
    pub attention_cluster: Option<bool>,
    /// Which one-row projections run on the ring GEMV (`kernels::launch::gemv_async`), a bit each: 1
    /// q/k/v, 2 o, 4 gate/up, 8 down (the rule: all or none, `kernels::geometry::ring_gemv_rule`).
    pub ring_gemv: Option<u8>,
    /// The ring GEMV's blocks per multiprocessor (1 or 2; the rule:
    /// `kernels::geometry::GEMV_ASYNC_BLOCKS_PER_SM`).
    pub ring_gemv_blocks: Option<u32>,
    /// With `Gemm::Auto`, whether a step runs its projections on the GEMV kernels (`true`,
    /// where they are instantiated for its rows: up to 8) or on cuBLAS (`false`); the rule:
    /// the GEMV kernels at one row only (`GEMV_AUTO_MAX_ROWS`).
    pub gemv: Option<bool>,
}

/// The keys besides the projections' that `--tune` reads, as its errors list them.
const OTHER_KEYS: &str = "splits, blocks, pf, cluster, cpa, cpab, gemv";

/// MiB the attention prefetches at one row unless `pf=N` says otherwise: about what the
/// memory can fetch while the attention and the o projection run; more competes with the
/// q/k/v projection still streaming its weights.
pub const PREFETCH_MIB_RULE: u64 = 4;

impl Tuning {
    /// Whether every choice is the rules'.
    pub fn is_default(&self) -> bool {
        *self == Tuning::default()
    }

    /// Bytes the attention prefetches at one row.
    pub fn prefetch_bytes(&self) -> u64 {
        self.prefetch_mib.unwrap_or(PREFETCH_MIB_RULE) << 20
    }

    /// Whether projection `i` (in `PROJECTIONS`' order) runs on the ring GEMV at one row,
    /// given the rule's answer for the model (`by_rule`).
    pub fn ring_gemv_for(&self, i: usize, by_rule: bool) -> bool {
        let mask = self.ring_gemv.unwrap_or(if by_rule { 15 } else { 0 });
        i < 4 && mask >> i & 1 == 1
    }

    /// These choices where set, `under`'s where not (a hand-set choice over a bucket's).
    pub fn over(self, under: Tuning) -> Tuning {
        let mut warps = self.warps_per_column;
        for (w, u) in warps.iter_mut().zip(under.warps_per_column) {
            *w = w.or(u);
        }
        Tuning {
            warps_per_column: warps,
            attention_splits: self.attention_splits.or(under.attention_splits),
            gemv_blocks_per_sm: self.gemv_blocks_per_sm.or(under.gemv_blocks_per_sm),
            prefetch_mib: self.prefetch_mib.or(under.prefetch_mib),
            attention_cluster: self.attention_cluster.or(under.attention_cluster),
            ring_gemv: self.ring_gemv.or(under.ring_gemv),
            ring_gemv_blocks: self.ring_gemv_blocks.or(under.ring_gemv_blocks),
            gemv: self.gemv.or(under.gemv),
        }
    }
}

impl FromStr for Tuning {
    type Err = String;

    /// `default`, or comma-separated `KEY=N` with KEY one of qkv, o, gate_up, down, head (warps
    /// per column: 1, 2, 4 or 8), splits (at least 1), blocks (1 to 4), pf (MiB, up to 1024),
    /// cluster (0 or 1), cpa (0 to 15), cpab (1 or 2) and gemv (0 or 1).
    fn from_str(s: &str) -> Result<Tuning, String> {
        let mut t = Tuning::default();
        let s = s.trim();
        if s.is_empty() || s == "default" {
            return Ok(t);
        }
        for item in s.split(',') {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                format!(
                    "'{item}' is not KEY=N (keys: {}, {OTHER_KEYS})",
                    PROJECTIONS.join(", ")
                )
            })?;
            let (key, value) = (key.trim(), value.trim());
            let n: usize = value
                .parse()
                .map_err(|_| format!("{key}={value}: not a whole number"))?;
            if key == "pf" {
                if n > 1024 {
                    return Err(format!("pf={n}: at most 1024 MiB"));
                }
                t.prefetch_mib = Some(n as u64);
                continue;
            }
            if key == "cluster" || key == "gemv" {
                if n > 1 {
                    return Err(format!("{key}={n}: 0 or 1"));
                }
                if key == "gemv" {
                    t.gemv = Some(n == 1);
                } else {
                    t.attention_cluster = Some(n == 1);
                }
                continue;
            }
            if key == "cpa" {
                if n > 15 {
                    return Err(format!(
                        "cpa={n}: a sum of 1 (q/k/v), 2 (o), 4 (gate/up) and 8 (down)"
                    ));
                }
                t.ring_gemv = Some(n as u8);
                continue;
            }
            if key == "cpab" {
                if n != 1 && n != 2 {
                    return Err(format!("cpab={n}: 1 or 2 blocks per multiprocessor"));
                }
                t.ring_gemv_blocks = Some(n as u32);
                continue;
            }
            if key == "blocks" {
                if !(1..=4).contains(&n) {
                    return Err(format!("blocks={n}: 1 to 4 blocks per multiprocessor"));
                }
                t.gemv_blocks_per_sm = Some(n as u32);
                continue;
            }
            if key == "splits" {
                if n == 0 {
                    return Err("splits=0: at least one block per row".into());
                }
                t.attention_splits = Some(n);
                continue;
            }
            let i = PROJECTIONS.iter().position(|&p| p == key).ok_or_else(|| {
                format!(
                    "unknown key '{key}' (keys: {}, {OTHER_KEYS})",
                    PROJECTIONS.join(", ")
                )
            })?;
            if ![1, 2, 4, 8].contains(&n) {
                return Err(format!(
                    "{key}={n}: warps per column must be 1, 2, 4 or 8 (they share out a block of 8 warps)"
                ));
            }
            t.warps_per_column[i] = Some(n);
        }
        Ok(t)
    }
}

impl fmt::Display for Tuning {
    /// The form [`Tuning::from_str`] reads (`default` when nothing is set).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = PROJECTIONS
            .iter()
            .zip(self.warps_per_column)
            .filter_map(|(k, v)| v.map(|n| format!("{k}={n}")))
            .collect();
        if let Some(n) = self.attention_splits {
            parts.push(format!("splits={n}"));
        }
        if let Some(n) = self.gemv_blocks_per_sm {
            parts.push(format!("blocks={n}"));
        }
        if let Some(n) = self.prefetch_mib {
            parts.push(format!("pf={n}"));
        }
        if let Some(c) = self.attention_cluster {
            parts.push(format!("cluster={}", u8::from(c)));
        }
        if let Some(n) = self.ring_gemv {
            parts.push(format!("cpa={n}"));
        }
        if let Some(n) = self.ring_gemv_blocks {
            parts.push(format!("cpab={n}"));
        }
        if let Some(g) = self.gemv {
            parts.push(format!("gemv={}", u8::from(g)));
        }
        if parts.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_and_print_alike() {
        for spec in [
            "default",
            "down=4",
            "qkv=2,o=8,splits=1",
            "head=1,splits=64",
            "o=4,blocks=2",
            "splits=4,pf=0",
            "pf=16",
            "splits=8,cluster=0",
            "cpa=5,cpab=1",
            "splits=2,gemv=0",
            "o=2,gemv=1",
        ] {
            let t: Tuning = spec.parse().unwrap();
            assert_eq!(t.to_string(), spec);
        }
        let t: Tuning = " down = 4 , splits=2 ".parse().unwrap();
        assert_eq!(t.warps_per_column[3], Some(4));
        assert_eq!(t.attention_splits, Some(2));
        assert!("".parse::<Tuning>().unwrap().is_default());
    }

    #[test]
    fn bad_specs_name_the_key_and_the_rule() {
        let err = |s: &str| s.parse::<Tuning>().unwrap_err();
        assert!(err("down=3").contains("1, 2, 4 or 8"));
        assert!(err("up=2").contains("unknown key 'up'"));
        assert!(err("down").contains("not KEY=N"));
        assert!(err("splits=0").contains("at least one"));
        assert!(err("blocks=5").contains("1 to 4"));
        assert!(err("pf=2000").contains("at most 1024"));
        assert!(err("early=0").contains("unknown key 'early'"));
        assert!(err("cluster=2").contains("0 or 1"));
        assert!(err("o=x").contains("not a whole number"));
        assert!(err("cpa=16").contains("8 (down)"));
        assert!(err("cpab=3").contains("1 or 2"));
        assert_eq!(err("gemv=2"), "gemv=2: 0 or 1");
    }
}
