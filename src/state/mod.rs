//! The state a served model keeps between calls: the fp32 checkpoint pool, the spec ring of raw
//! inputs (verify writes it, fold replays it) and the buffered-decode ring, each built from a
//! resolved configuration so that the capability gates hold by construction.

pub mod buffered_ring;
pub mod decode_ring;
pub mod deferred_ring;
pub mod pool;
pub mod spec_ring;
