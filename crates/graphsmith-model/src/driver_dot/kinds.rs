//! What one node of a driver dump is: its kind and parameters from its label, in the default
//! form (`0\nMEMSET\n(1065353216,1024)`) or the verbose one (a record with names and values).

use super::operands::{self, Block, Operand};
use super::record::{self, Field};
use crate::node::{
    AccessMode, ConditionalKind, Dim3, KernelParams, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeKind,
};

/// A node as read from its label.
pub(super) struct Parsed {
    pub kind: NodeKind,
    /// `Some(M)` for a node that embeds the graph `graph_M`.
    pub child: Option<u64>,
    /// The body graphs `graph_M` of a conditional node, in the dump's order.
    pub bodies: Vec<u64>,
    /// The bytes it touches, per operand, as absolute addresses.
    pub operands: Vec<Operand>,
    /// The first part of its label: the kernel's name or the kind's name.
    pub name: String,
}

impl Parsed {
    fn of(kind: NodeKind) -> Self {
        let name = kind.name().to_string();
        Self {
            kind,
            child: None,
            bodies: Vec::new(),
            operands: Vec::new(),
            name,
        }
    }
}

/// Reads a node's kind from its `label` (and `shape`). Errors are messages for the node's line.
pub(super) fn parse(label: &str, shape: Option<&str>) -> Result<Parsed, String> {
    if shape == Some("record") || label.trim_start().starts_with('{') {
        verbose_record(label)
    } else {
        plain(label, shape)
    }
}

/// The kind named by a dump's type keyword; `None` when `word` is not one.
fn keyword(word: &str) -> Option<NodeKind> {
    if !word
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        || !word.starts_with(|c: char| c.is_ascii_uppercase())
    {
        return None;
    }
    Some(match word {
        "KERNEL" => kernel(String::new(), None),
        "MEMCPY" => NodeKind::Memcpy(MemcpyParams {
            src: unknown_ref(),
            dst: unknown_ref(),
            bytes: 0,
        }),
        "MEMSET" => NodeKind::Memset(MemsetParams {
            dst: 0,
            element_size: 1,
            value: 0,
            width: 0,
            height: 1,
            pitch: 0,
        }),
        "HOST" => NodeKind::Host {
            name: String::new(),
        },
        "EMPTY" => NodeKind::Empty,
        "EVENT_RECORD" | "RECORD_EVENT" => NodeKind::EventRecord {
            event: String::new(),
        },
        "EVENT_WAIT" | "WAIT_EVENT" => NodeKind::EventWait {
            event: String::new(),
        },
        "MEM_ALLOC" => NodeKind::MemAlloc {
            address: 0,
            bytes: 0,
        },
        "MEM_FREE" => NodeKind::MemFree { address: 0 },
        "CONDITIONAL" => NodeKind::Conditional {
            conditional: ConditionalKind::If,
            bodies: 0,
            body_graphs: Vec::new(),
        },
        other => NodeKind::Other {
            name: other.to_ascii_lowercase(),
        },
    })
}

fn unknown_ref() -> MemRef {
    MemRef {
        space: MemorySpace::Unknown,
        address: 0,
    }
}

fn kernel(name: String, launch: Option<(Dim3, Dim3, u32)>) -> NodeKind {
    let (grid, block, shared_mem_bytes) =
        launch.unwrap_or((Dim3::new(0, 0, 0), Dim3::new(0, 0, 0), 0));
    NodeKind::Kernel(KernelParams {
        name,
        grid,
        block,
        shared_mem_bytes,
        args: vec![],
        cluster: None,
    })
}

/// `graph_M` -> `M`.
pub(super) fn graph_ref(word: &str) -> Option<u64> {
    word.strip_prefix("graph_")?.parse().ok()
}

/// A number as the dump writes it: decimal, or hex with `0x`; a leading number is enough
/// (`0 (topoId: 2)` -> 0).
fn number(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let digits: String = hex.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        return u64::from_str_radix(&digits, 16).ok();
    }
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Label lines of a non-record node: real line breaks and `\n`, `\l`, `\r` escapes, trimmed,
/// empty lines dropped.
fn lines(label: &str) -> Vec<String> {
    label
        .replace("\\n", "\n")
        .replace("\\l", "\n")
        .replace("\\r", "\n")
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A default or verbose label that is not a record: `N [(topoId: T)]`, then the kind, the
/// kernel's name or `graph_M`, then details (`(DtoD,1024)`, `event: 0x...`).
fn plain(label: &str, shape: Option<&str>) -> Result<Parsed, String> {
    let lines = lines(label);
    let Some(what) = lines.get(1) else {
        return Err(format!(
            "node label {:?} has no kind (expected a number, then the kind on the next line)",
            label.trim()
        ));
    };
    let details = &lines[2..];
    let detail = |key: &str| {
        details.iter().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.trim_start().strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
    };
    if let Some(m) = graph_ref(what) {
        let mut p = Parsed::of(NodeKind::ChildGraph {
            graph: Box::default(),
        });
        p.child = Some(m);
        return Ok(p);
    }
    let kind = match keyword(what) {
        Some(kind) if shape != Some("octagon") => kind,
        _ => {
            let (name, launch) = kernel_name(what);
            let mut p = Parsed::of(kernel(name.clone(), launch));
            p.name = name;
            return Ok(p);
        }
    };
    let paren = details
        .iter()
        .find_map(|l| l.strip_prefix('(').and_then(|l| l.strip_suffix(')')))
        .map(|inner| inner.split(',').map(str::trim).collect::<Vec<_>>());
    let kind = match kind {
        NodeKind::Memcpy(mut m) => {
            // `(DtoD,1024)`: direction and bytes; no addresses in the default form.
            if let Some(parts) = paren {
                if let Some(dir) = parts.first() {
                    let mut spaces = dir.split("to").map(space_letter);
                    m.src.space = spaces.next().unwrap_or(MemorySpace::Unknown);
                    m.dst.space = spaces.next().unwrap_or(MemorySpace::Unknown);
                }
                m.bytes = parts.get(1).and_then(|b| number(b)).unwrap_or(0);
            }
            NodeKind::Memcpy(m)
        }
        NodeKind::Memset(mut m) => {
            // `(value,bytes)`: no address or element size in the default form.
            if let Some(parts) = paren {
                m.value = parts.first().and_then(|v| number(v)).unwrap_or(0) as u32;
                m.width = parts.get(1).and_then(|b| number(b)).unwrap_or(0);
            }
            NodeKind::Memset(m)
        }
        NodeKind::Host { .. } => NodeKind::Host {
            name: detail("fn").unwrap_or_default(),
        },
        NodeKind::EventRecord { .. } => NodeKind::EventRecord {
            event: detail("event").unwrap_or_default(),
        },
        NodeKind::EventWait { .. } => NodeKind::EventWait {
            event: detail("event").unwrap_or_default(),
        },
        other => with_pairs(
            other,
            &details
                .iter()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect::<Vec<_>>(),
        ),
    };
    Ok(Parsed::of(kind))
}

/// `H` host, `D` device, `A` array; anything else unknown.
fn space_letter(letter: &str) -> MemorySpace {
    match letter.trim() {
        "H" => MemorySpace::Host,
        "D" => MemorySpace::Device,
        "A" => MemorySpace::Array,
        _ => MemorySpace::Unknown,
    }
}

/// `name<<<grid,block,shmem>>>` -> the name and the launch, when given. Grid and block are a
/// number (x) or `(x,y,z)`.
fn kernel_name(text: &str) -> (String, Option<(Dim3, Dim3, u32)>) {
    let Some((name, rest)) = text.split_once("<<<") else {
        return (text.trim().to_string(), None);
    };
    let inner = rest.trim_end().trim_end_matches(">>>");
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in inner.chars() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    let dim = |s: &str| -> Option<Dim3> {
        let s = s
            .trim()
            .trim_start_matches(['(', '{'])
            .trim_end_matches([')', '}']);
        let v: Vec<u32> = s
            .split(',')
            .map(|x| x.trim().parse::<u32>().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [x] => Some(Dim3::linear(x)),
            [x, y] => Some(Dim3::new(x, y, 1)),
            [x, y, z] => Some(Dim3::new(x, y, z)),
            _ => None,
        }
    };
    let launch = match &parts[..] {
        [g, b, s, ..] => (|| Some((dim(g)?, dim(b)?, s.trim().parse().ok()?)))(),
        [g, b] => (|| Some((dim(g)?, dim(b)?, 0)))(),
        _ => None,
    };
    (name.trim().to_string(), launch)
}

/// A verbose record: `{KIND | {names} | {values} ...}`.
fn verbose_record(label: &str) -> Result<Parsed, String> {
    let fields = record::parse(label).map_err(|e| format!("record label: {e}"))?;
    let first = fields
        .iter()
        .find_map(|f| f.text().filter(|t| !t.is_empty()))
        .unwrap_or_default();
    let pairs = record::pairs(&fields);
    if first == "KERNEL" {
        // `{ID | 0 (topoId: 2) | name<<<1,256,0>>>}`
        let named = fields.iter().find_map(|f| match f {
            Field::Group(g) if g.len() >= 3 && g[0].text() == Some("ID") => g[2].text(),
            _ => None,
        });
        let (name, launch) = kernel_name(named.unwrap_or_default());
        let mut p = Parsed::of(kernel(name.clone(), launch));
        p.name = name;
        return Ok(p);
    }
    if let Some(m) = graph_ref(first) {
        let mut p = Parsed::of(NodeKind::ChildGraph {
            graph: Box::default(),
        });
        p.child = Some(m);
        return Ok(p);
    }
    let kind = keyword(first).unwrap_or_else(|| NodeKind::Other {
        name: first.to_ascii_lowercase(),
    });
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let num = |key: &str| get(key).and_then(number);
    let mut operands = Vec::new();
    let mut bodies = Vec::new();
    let kind = match kind {
        NodeKind::Memset(_) => {
            let m = MemsetParams {
                dst: num("dptr").unwrap_or(0),
                element_size: num("elementSize").unwrap_or(1) as u32,
                value: num("value").unwrap_or(0) as u32,
                width: num("width").unwrap_or(0),
                height: num("height").unwrap_or(1),
                pitch: num("pitch").unwrap_or(0),
            };
            let row = m.width.saturating_mul(m.element_size as u64);
            let block = Block::at(m.dst, (0, 0, 0), m.pitch, 0, row, m.height, 1);
            operands.extend(Operand::of(m.dst, block, AccessMode::Write));
            NodeKind::Memset(m)
        }
        NodeKind::Memcpy(_) if get("kind").is_some() || get("srcPtr.ptr").is_some() => {
            // The runtime API's layout (`cudaMemcpy3DParms`): `kind`, `{srcPtr | dstPtr}` over
            // `{pitch | ptr | xsize | ysize}` twice, `srcPos`, `dstPos`, `Extent`.
            let width = num("Extent.Width").unwrap_or(0);
            let height = num("Extent.Height").unwrap_or(1);
            let depth = num("Extent.Depth").unwrap_or(1);
            let (src_space, dst_space) = operands::kind_spaces(get("kind").unwrap_or_default());
            let side = |ptr: &str, pos: &str, space: MemorySpace, mode| {
                let key = |k: &str| format!("{ptr}.{k}");
                let at = |k: &str| num(&format!("{pos}.{k}")).unwrap_or(0);
                let ptr = num(&key("ptr")).unwrap_or(0);
                let block = Block::at(
                    ptr,
                    (at("x"), at("y"), at("z")),
                    num(&key("pitch")).unwrap_or(0),
                    num(&key("ysize")).unwrap_or(0),
                    width,
                    height,
                    depth,
                );
                copy_side(space, ptr, block, mode)
            };
            let (src, src_operand) = side("srcPtr", "srcPos", src_space, AccessMode::Read);
            let (dst, dst_operand) = side("dstPtr", "dstPos", dst_space, AccessMode::Write);
            operands.extend(src_operand);
            operands.extend(dst_operand);
            copy_kind(src, dst, (width, height, depth))
        }
        NodeKind::Memcpy(_) => {
            // The driver API's layout (`CUDA_MEMCPY3D`): `{src | dst}` over `MemoryType`,
            // `Array`, `Host`, `Device`, `XInBytes`, `Y`, `Z`, `Pitch`, `Height`, `LOD`, then
            // `Extent {WidthInBytes | Height | Depth}`.
            let width = num("Extent.WidthInBytes").unwrap_or(0);
            let height = num("Extent.Height").unwrap_or(1);
            let depth = num("Extent.Depth").unwrap_or(1);
            let side = |prefix: &str, mode| -> (MemRef, Option<Operand>) {
                let key = |k: &str| format!("{prefix}.{k}");
                let kind = get(&key("MemoryType")).unwrap_or_default();
                let array = num(&key("Array")).unwrap_or(0);
                let host = num(&key("Host")).unwrap_or(0);
                let device = num(&key("Device")).unwrap_or(0);
                let (space, base) = match operands::space(kind) {
                    MemorySpace::Array => (MemorySpace::Array, array),
                    _ if array != 0 => (MemorySpace::Array, array),
                    MemorySpace::Host => (MemorySpace::Host, host),
                    _ if device == 0 && host != 0 => (MemorySpace::Host, host),
                    MemorySpace::Device => (MemorySpace::Device, device),
                    _ if device != 0 => (MemorySpace::Device, device),
                    _ => (MemorySpace::Unknown, 0),
                };
                let block = Block::at(
                    base,
                    (
                        num(&key("XInBytes")).unwrap_or(0),
                        num(&key("Y")).unwrap_or(0),
                        num(&key("Z")).unwrap_or(0),
                    ),
                    num(&key("Pitch")).unwrap_or(0),
                    num(&key("Height")).unwrap_or(0),
                    width,
                    height,
                    depth,
                );
                copy_side(space, base, block, mode)
            };
            let (src, src_operand) = side("src", AccessMode::Read);
            let (dst, dst_operand) = side("dst", AccessMode::Write);
            operands.extend(src_operand);
            operands.extend(dst_operand);
            copy_kind(src, dst, (width, height, depth))
        }
        NodeKind::Conditional { .. } => {
            // `{True | graph_15}`, `{False | graph_16}`, a case per body of a switch.
            bodies = pairs
                .iter()
                .filter_map(|(_, v)| graph_ref(v.trim()))
                .collect();
            match with_pairs(kind, &pairs) {
                NodeKind::Conditional {
                    conditional,
                    bodies: 0,
                    body_graphs,
                } => NodeKind::Conditional {
                    conditional,
                    bodies: bodies.len().min(u32::MAX as usize) as u32,
                    body_graphs,
                },
                other => other,
            }
        }
        other => with_pairs(other, &pairs),
    };
    let mut p = Parsed::of(kind);
    p.operands = operands;
    p.bodies = bodies;
    Ok(p)
}

/// Fills the parameters a kind can take from `name: value` pairs (verbose details).
/// One side of a copy in either layout: where it starts, and the device bytes it touches (none
/// for an array, whose memory is not addressed by pointers).
fn copy_side(
    space: MemorySpace,
    base: u64,
    block: Block,
    mode: AccessMode,
) -> (MemRef, Option<Operand>) {
    let operand = (space != MemorySpace::Array)
        .then(|| Operand::of(base, block, mode))
        .flatten();
    (
        MemRef {
            space,
            address: block.start,
        },
        operand,
    )
}

/// A copy node of `width` bytes by `height` rows by `depth` slices.
fn copy_kind(src: MemRef, dst: MemRef, (width, height, depth): (u64, u64, u64)) -> NodeKind {
    NodeKind::Memcpy(MemcpyParams {
        src,
        dst,
        bytes: width
            .saturating_mul(height.max(1))
            .saturating_mul(depth.max(1)),
    })
}

fn with_pairs(kind: NodeKind, pairs: &[(String, String)]) -> NodeKind {
    let find = |pred: &dyn Fn(&str) -> bool| {
        pairs
            .iter()
            .find(|(k, _)| pred(&k.to_ascii_lowercase()))
            .map(|(_, v)| v.clone())
    };
    let address = || {
        find(&|k| k.contains("ptr") || k == "address")
            .and_then(|v| number(&v))
            .unwrap_or(0)
    };
    match kind {
        NodeKind::MemAlloc { .. } => NodeKind::MemAlloc {
            address: address(),
            bytes: find(&|k| k.contains("size"))
                .and_then(|v| number(&v))
                .unwrap_or(0),
        },
        NodeKind::MemFree { .. } => NodeKind::MemFree { address: address() },
        NodeKind::Host { .. } => NodeKind::Host {
            name: find(&|k| k == "fn").unwrap_or_default(),
        },
        NodeKind::EventRecord { .. } => NodeKind::EventRecord {
            event: find(&|k| k == "event").unwrap_or_default(),
        },
        NodeKind::EventWait { .. } => NodeKind::EventWait {
            event: find(&|k| k == "event").unwrap_or_default(),
        },
        NodeKind::Conditional { .. } => {
            let all: String = pairs
                .iter()
                .map(|(k, v)| format!("{k} {v} "))
                .collect::<String>()
                .to_ascii_uppercase();
            let conditional = if all.contains("WHILE") {
                ConditionalKind::While
            } else if all.contains("SWITCH") {
                ConditionalKind::Switch
            } else {
                ConditionalKind::If
            };
            let bodies = find(&|k| k.contains("size") || k.contains("bodies"))
                .and_then(|v| number(&v))
                .unwrap_or(0) as u32;
            NodeKind::Conditional {
                conditional,
                bodies,
                body_graphs: Vec::new(),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_launches() {
        assert_eq!(
            kernel_name("k<<<1,256,0>>>"),
            ("k".into(), Some((Dim3::linear(1), Dim3::linear(256), 0)))
        );
        assert_eq!(
            kernel_name("k<<<(2,3,1),(32,8,1),4096>>>"),
            (
                "k".into(),
                Some((Dim3::new(2, 3, 1), Dim3::new(32, 8, 1), 4096))
            )
        );
        assert_eq!(kernel_name("k<<<x>>>"), ("k".into(), None));
        assert_eq!(kernel_name("plain"), ("plain".into(), None));
    }

    #[test]
    fn numbers() {
        assert_eq!(number("0 (topoId: 2)"), Some(0));
        assert_eq!(number("0x00007F1FD5E00400"), Some(0x7F1F_D5E0_0400));
        assert_eq!(number("DEVICE"), None);
    }
}
