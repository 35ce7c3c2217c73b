//! Reading a model and its references from files: the config, the checkpoint's weights on
//! the host and their upload to the device, the tokenizer, the reference file `check` compares
//! against and its tolerance.

pub(crate) mod checkpoint;
pub(crate) mod config;
pub(crate) mod hf_config;
pub(crate) mod inspect;
pub(crate) mod reference;
pub(crate) mod tokenizer;
pub(crate) mod tolerance;
pub(crate) mod weights;

pub use checkpoint::TensorInfo;
pub use checkpoint::{load_weights, random_weights, HostWeights, LayerWeights};
pub use config::{Config, RopeScaling};
pub use hf_config::Understood;
pub use inspect::{inspect, Inspection};
pub use reference::{load_reference, top2, RefSequence};
pub use tokenizer::{parse_ids, Codec};
pub use tolerance::Tolerance;
