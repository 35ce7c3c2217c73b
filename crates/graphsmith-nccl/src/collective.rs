//! Collectives as data: what each one is (kind, reduction, element type, count), its label in
//! graphs (`nccl all_reduce(sum, f32 x 4096)`), and the cross-rank check of a capture plan.
//!
//! NCCL collectives in a graph must be captured in the same order with the same shapes on every
//! rank; a rank that captures something else waits in the graph forever. So before capturing,
//! each rank sends the plan of what it is about to capture (one line per collective, see
//! [`encode_plan`]) over the bootstrap connection and rank 0 compares them
//! ([`compare_plans`]): a difference is an error on every rank naming the first differing
//! collective and the ranks, and nothing is captured.

use std::fmt;

use graphsmith::Element;

/// A reduction (`ncclRedOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg` (NCCL 2.10 or newer).
    Avg,
}

impl ReduceOp {
    /// NCCL's value.
    pub fn raw(self) -> i32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
            ReduceOp::Avg => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }
}

/// An element type NCCL reduces (`ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `ncclInt8`.
    I8,
    /// `ncclUint8`.
    U8,
    /// `ncclInt32`.
    I32,
    /// `ncclUint32`.
    U32,
    /// `ncclInt64`.
    I64,
    /// `ncclUint64`.
    U64,
    /// `ncclFloat32`.
    F32,
    /// `ncclFloat64`.
    F64,
}

impl DataType {
    /// NCCL's value.
    pub fn raw(self) -> i32 {
        match self {
            DataType::I8 => 0,
            DataType::U8 => 1,
            DataType::I32 => 2,
            DataType::U32 => 3,
            DataType::I64 => 4,
            DataType::U64 => 5,
            DataType::F32 => 7,
            DataType::F64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
        }
    }
}

/// A device element type with an NCCL data type.
pub trait NcclElement: Element {
    /// Its NCCL type.
    const DTYPE: DataType;
}

macro_rules! nccl_elements {
    ($($t:ty => $d:ident),*) => { $( impl NcclElement for $t { const DTYPE: DataType = DataType::$d; } )* };
}
nccl_elements!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Every rank gets the reduction of every rank's buffer.
    AllReduce(ReduceOp),
    /// Every rank gets every rank's buffer, in rank order.
    AllGather,
    /// Every rank gets its share of the reduction.
    ReduceScatter(ReduceOp),
}

/// One collective as a plan names it: what it does, on which type, how many elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Collective {
    /// What it does.
    pub kind: Kind,
    /// The element type.
    pub dtype: DataType,
    /// NCCL's count: all elements for an all-reduce; the elements each rank sends for an
    /// all-gather and receives for a reduce-scatter.
    pub count: usize,
}

impl Collective {
    /// An all-reduce of `count` elements of `T`.
    pub fn all_reduce<T: NcclElement>(op: ReduceOp, count: usize) -> Collective {
        Collective {
            kind: Kind::AllReduce(op),
            dtype: T::DTYPE,
            count,
        }
    }

    /// An all-gather of `count` elements of `T` from each rank.
    pub fn all_gather<T: NcclElement>(count: usize) -> Collective {
        Collective {
            kind: Kind::AllGather,
            dtype: T::DTYPE,
            count,
        }
    }

    /// A reduce-scatter giving each rank `count` elements of `T`.
    pub fn reduce_scatter<T: NcclElement>(op: ReduceOp, count: usize) -> Collective {
        Collective {
            kind: Kind::ReduceScatter(op),
            dtype: T::DTYPE,
            count,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (d, n) = (self.dtype.name(), self.count);
        match self.kind {
            Kind::AllReduce(op) => write!(f, "all_reduce({}, {d} x {n})", op.name()),
            Kind::AllGather => write!(f, "all_gather({d} x {n} per rank)"),
            Kind::ReduceScatter(op) => {
                write!(f, "reduce_scatter({}, {d} x {n} per rank)", op.name())
            }
        }
    }
}

/// The label of a collective's node: `nccl all_reduce(sum, f32 x 4096)`.
pub fn label(c: &Collective) -> String {
    format!("nccl {c}")
}

/// A plan as the bytes each rank sends: one collective per line, as [`Collective`] displays.
pub fn encode_plan(plan: &[Collective]) -> Vec<u8> {
    plan.iter()
        .map(|c| format!("{c}\n"))
        .collect::<String>()
        .into_bytes()
}

/// FNV-1a, 64 bits: a short fingerprint of a plan for logs and errors.
pub fn plan_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Rank 0's check of every rank's plan (in rank order): `Ok` when all are equal, else which
/// collective differs first and on which ranks.
pub fn compare_plans(plans: &[&[u8]]) -> Result<(), String> {
    let Some(first) = plans.first() else {
        return Ok(());
    };
    if plans.iter().all(|p| p == first) {
        return Ok(());
    }
    let lines: Vec<Vec<&str>> = plans
        .iter()
        .map(|p| {
            std::str::from_utf8(p)
                .unwrap_or("<not UTF-8>")
                .lines()
                .collect()
        })
        .collect();
    let longest = lines.iter().map(Vec::len).max().unwrap_or(0);
    let at = (0..longest)
        .find(|&i| lines.iter().any(|l| l.get(i) != lines[0].get(i)))
        .unwrap_or(0);
    let ours = lines[0].get(at).copied();
    let differ: Vec<usize> = (1..lines.len())
        .filter(|&r| lines[r].get(at).copied() != ours)
        .collect();
    let show = |r: usize| match lines[r].get(at) {
        Some(c) => format!("rank {r} issues {c}"),
        None => format!(
            "rank {r} has none (it plans {} collective(s))",
            lines[r].len()
        ),
    };
    let mut text = format!("collective #{} differs: {}", at + 1, show(0));
    for r in differ {
        text.push_str("; ");
        text.push_str(&show(r));
    }
    let hashes: Vec<String> = plans
        .iter()
        .enumerate()
        .map(|(r, p)| format!("rank {r} {:016x}", plan_hash(p)))
        .collect();
    text.push_str(&format!(" (plan hashes: {})", hashes.join(", ")));
    Err(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(p: &[Collective]) -> Vec<u8> {
        encode_plan(p)
    }

    #[test]
    fn labels() {
        assert_eq!(
            label(&Collective::all_reduce::<f32>(ReduceOp::Sum, 4096)),
            "nccl all_reduce(sum, f32 x 4096)"
        );
        assert_eq!(
            Collective::all_gather::<i32>(8).to_string(),
            "all_gather(i32 x 8 per rank)"
        );
        assert_eq!(
            Collective::reduce_scatter::<f64>(ReduceOp::Max, 3).to_string(),
            "reduce_scatter(max, f64 x 3 per rank)"
        );
    }

    #[test]
    fn equal_plans_agree() {
        let p = plan(&[
            Collective::all_reduce::<f32>(ReduceOp::Sum, 4096),
            Collective::all_gather::<f32>(1024),
        ]);
        assert_eq!(compare_plans(&[&p, &p, &p]), Ok(()));
        assert_eq!(compare_plans(&[]), Ok(()));
    }

    #[test]
    fn the_first_differing_collective_and_its_ranks_are_named() {
        let a = plan(&[
            Collective::all_reduce::<f32>(ReduceOp::Sum, 4096),
            Collective::all_gather::<f32>(1024),
        ]);
        let b = plan(&[
            Collective::all_reduce::<f32>(ReduceOp::Sum, 4096),
            Collective::reduce_scatter::<f32>(ReduceOp::Sum, 1024),
        ]);
        let text = compare_plans(&[&a, &a, &b]).unwrap_err();
        let (h0, h2) = (plan_hash(&a), plan_hash(&b));
        assert_eq!(
            text,
            format!(
                "collective #2 differs: rank 0 issues all_gather(f32 x 1024 per rank); rank 2 \
                 issues reduce_scatter(sum, f32 x 1024 per rank) (plan hashes: rank 0 \
                 {h0:016x}, rank 1 {h0:016x}, rank 2 {h2:016x})"
            )
        );
    }

    #[test]
    fn a_shorter_plan_is_named() {
        let a = plan(&[Collective::all_reduce::<f32>(ReduceOp::Sum, 16)]);
        let empty = plan(&[]);
        let text = compare_plans(&[&a, &empty]).unwrap_err();
        assert!(
            text.starts_with(
                "collective #1 differs: rank 0 issues all_reduce(sum, f32 x 16); rank 1 has \
                 none (it plans 0 collective(s))"
            ),
            "{text}"
        );
        let text = compare_plans(&[&empty, &a]).unwrap_err();
        assert!(
            text.starts_with(
                "collective #1 differs: rank 0 has none (it plans 0 collective(s)); rank 1 \
                 issues all_reduce(sum, f32 x 16)"
            ),
            "{text}"
        );
    }
}
