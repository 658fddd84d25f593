//! Host-memory kernel calls on any backend, for tests, case files and the demo: the library's
//! host calls on Reference and Emulated, and on Cuda an explicit round trip (upload every
//! buffer, the device-memory call on a fresh [`Stream`], then [`Stream::check_errors`] and the
//! downloads). The library itself never stages: a host-memory call on Cuda is refused, and an
//! engine serves through the device-memory calls. Same names and arguments as the library's
//! host calls, so a test picks its backend and nothing else.

use replayssm::checks::check_seqlens;
use replayssm::dtype::{ActView, ActViewMut};
use replayssm::kernels::decode::DecodeRows;
use replayssm::kernels::recurrent::{RecurrentOutputs, RecurrentPlan};
use replayssm::kernels::verify::VerifyPlan;
use replayssm::memory::{DeviceAct, DeviceActView, DeviceSeqlens, DeviceVec, Stream};
use replayssm::DeviceAccepted;
use replayssm::{
    Accepted, Backend, CheckpointPool, DType, DecodeInputs, DecodeRing, DecodeStep, DeferredRing, Device, DraftTree,
    Gate, GateForm, RawGate, RecurrentInputs, Result, SpecRing, Track,
};

/// The stream of one staged call and its uploads.
struct Up {
    stream: Stream,
}

/// A host view's layout: `(offset, tokens, row, stride)`.
type Layout = (usize, usize, usize, usize);

fn layout(v: &ActView<'_>) -> Layout {
    (v.offset, v.tokens, v.row, v.stride)
}

fn view(d: &DeviceAct, l: Layout) -> DeviceActView<'_> {
    d.view(l.0, l.1, l.2, l.3)
}

/// Device copies of a call's token inputs (whole buffers, so views keep their layouts): what a
/// test uploads once to call the device-memory kernels.
pub struct DeviceTokens {
    variant: replayssm::Variant,
    dims: replayssm::HeadDims,
    q: (DeviceAct, Layout),
    k: (DeviceAct, Layout),
    v: (DeviceAct, Layout),
    gate: GateUp,
    cu_seqlens: DeviceVec<i32>,
    slots: DeviceVec<i32>,
    max_seqlen: usize,
    scale: f32,
    qk_l2norm: bool,
}

enum GateUp {
    Raw {
        a: (DeviceAct, Layout),
        b: (DeviceAct, Layout),
        a_log: DeviceVec<f32>,
        dt_bias: DeviceVec<f32>,
        form: GateForm,
    },
    Precomputed {
        g: DeviceVec<f32>,
        beta: DeviceVec<f32>,
    },
}

/// Uploads the whole buffer behind a view and keeps the view's layout.
fn act_up(stream: &Stream, v: &ActView<'_>) -> Result<(DeviceAct, Layout)> {
    Ok((DeviceAct::from_host(stream, v.buf)?, layout(v)))
}

fn gate_up(stream: &Stream, gate: &Gate<'_>) -> Result<GateUp> {
    Ok(match *gate {
        Gate::Raw(RawGate {
            a,
            b,
            a_log,
            dt_bias,
            form,
        }) => GateUp::Raw {
            a: act_up(stream, &a)?,
            b: act_up(stream, &b)?,
            a_log: DeviceVec::from_host(stream, a_log)?,
            dt_bias: DeviceVec::from_host(stream, dt_bias)?,
            form,
        },
        Gate::Precomputed { g, beta } => GateUp::Precomputed {
            g: DeviceVec::from_host(stream, g)?,
            beta: DeviceVec::from_host(stream, beta)?,
        },
    })
}

impl Up {
    fn new() -> Result<Up> {
        Ok(Up {
            stream: Stream::new(Backend::Cuda)?,
        })
    }

    fn ints(&self, v: &[i32]) -> Result<DeviceVec<i32>> {
        DeviceVec::from_host(&self.stream, v)
    }

    fn act(&self, v: &ActView<'_>) -> Result<(DeviceAct, Layout)> {
        act_up(&self.stream, v)
    }

    fn gate(&self, gate: &Gate<'_>) -> Result<GateUp> {
        gate_up(&self.stream, gate)
    }

    fn tokens(&self, inp: &RecurrentInputs<'_>) -> Result<DeviceTokens> {
        DeviceTokens::upload(&self.stream, inp)
    }

    /// An output buffer's contents (untouched elements keep their values) and its view's layout.
    fn out(&self, o: &ActViewMut<'_>) -> Result<(DeviceAct, Layout)> {
        Ok((
            DeviceAct::from_host(&self.stream, o.buf)?,
            (o.offset, o.tokens, o.row, o.stride),
        ))
    }

    /// Waits, turns a device-reported error into the call's error, and downloads `o`.
    fn finish_out(&self, dev: &DeviceAct, o: &mut ActViewMut<'_>) -> Result<()> {
        self.stream.check_errors()?;
        *o.buf = dev.to_host(&self.stream)?;
        Ok(())
    }
}

fn gate_view(g: &GateUp) -> Gate<'_, Device> {
    match g {
        GateUp::Raw {
            a,
            b,
            a_log,
            dt_bias,
            form,
        } => Gate::Raw(RawGate {
            a: view(&a.0, a.1),
            b: view(&b.0, b.1),
            a_log: a_log.as_slice(),
            dt_bias: dt_bias.as_slice(),
            form: *form,
        }),
        GateUp::Precomputed { g, beta } => Gate::Precomputed {
            g: g.as_slice(),
            beta: beta.as_slice(),
        },
    }
}

impl DeviceTokens {
    /// Uploads the token inputs `inp` to the stream's backend (explicit transfers).
    pub fn upload(stream: &Stream, inp: &RecurrentInputs<'_>) -> Result<DeviceTokens> {
        let (_, max_seqlen) = check_seqlens(inp.cu_seqlens, inp.q.tokens)?;
        Ok(DeviceTokens {
            variant: inp.variant,
            dims: inp.dims,
            q: act_up(stream, &inp.q)?,
            k: act_up(stream, &inp.k)?,
            v: act_up(stream, &inp.v)?,
            gate: gate_up(stream, &inp.gate)?,
            cu_seqlens: DeviceVec::from_host(stream, inp.cu_seqlens)?,
            slots: DeviceVec::from_host(stream, inp.slots)?,
            max_seqlen,
            scale: inp.scale,
            qk_l2norm: inp.qk_l2norm,
        })
    }

    /// The uploaded tokens as one decode step's inputs (row `b` is token `b`).
    pub fn decode_inputs(&self) -> DecodeInputs<'_, Device> {
        DecodeInputs {
            variant: self.variant,
            dims: self.dims,
            q: view(&self.q.0, self.q.1),
            k: view(&self.k.0, self.k.1),
            v: view(&self.v.0, self.v.1),
            gate: gate_view(&self.gate),
            scale: self.scale,
            qk_l2norm: self.qk_l2norm,
        }
    }

    /// The uploaded inputs as the device calls take them.
    pub fn inputs(&self) -> RecurrentInputs<'_, Device> {
        RecurrentInputs {
            variant: self.variant,
            dims: self.dims,
            q: view(&self.q.0, self.q.1),
            k: view(&self.k.0, self.k.1),
            v: view(&self.v.0, self.v.1),
            gate: gate_view(&self.gate),
            cu_seqlens: DeviceSeqlens {
                cu: self.cu_seqlens.as_slice(),
                max_seqlen: self.max_seqlen,
            },
            slots: self.slots.as_slice(),
            scale: self.scale,
            qk_l2norm: self.qk_l2norm,
        }
    }
}

/// Kernel R: [`replayssm::recurrent`], staged on Cuda.
pub fn recurrent(backend: Backend, inp: &RecurrentInputs<'_>, out: &mut RecurrentOutputs<'_>) -> Result<RecurrentPlan> {
    recurrent_with_records(backend, inp, out, DType::F32)
}

pub fn recurrent_with_records(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    out: &mut RecurrentOutputs<'_>,
    records: DType,
) -> Result<RecurrentPlan> {
    if backend != Backend::Cuda {
        return replayssm::recurrent_with_records(backend, inp, out, records);
    }
    // The host checks first (contents included): a refusal writes nothing, as on the host.
    replayssm::kernels::recurrent::validate(backend, inp, out)?;
    let up = Up::new()?;
    let t = up.tokens(inp)?;
    let (o, ol) = up.out(&out.o)?;
    let mut o = o;
    let mut state = DeviceVec::from_host(&up.stream, out.state)?;
    let mut snaps = match out.snapshots.as_deref() {
        Some(s) => Some(DeviceVec::from_host(&up.stream, s)?),
        None => None,
    };
    let plan = {
        let mut dout = RecurrentOutputs::<Device> {
            o: o.view_mut(ol.0, ol.1, ol.2, ol.3),
            state: state.as_mut_slice(),
            write_state: out.write_state,
            snapshots: snaps.as_mut().map(|s| s.as_mut_slice()),
        };
        up.stream.recurrent_with_records(&t.inputs(), &mut dout, records)?
    };
    up.finish_out(&o, &mut out.o)?;
    state.download(&up.stream, out.state)?;
    if let (Some(d), Some(h)) = (snaps, out.snapshots.as_deref_mut()) {
        d.download(&up.stream, h)?;
    }
    Ok(plan)
}

/// Kernel V (VT with a `tree`): [`replayssm::verify`], staged on Cuda.
pub fn verify(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    tree: Option<&DraftTree>,
    pool: &CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    ring: Option<&mut SpecRing>,
) -> Result<VerifyPlan> {
    if backend != Backend::Cuda {
        return replayssm::verify(backend, inp, tree, pool, layer, o, ring);
    }
    if let Some(t) = tree {
        t.check_matches(inp.cu_seqlens)?;
    }
    replayssm::kernels::verify::validate_verify(backend, inp, pool, layer, o, ring.as_deref())?;
    let up = Up::new()?;
    let t = up.tokens(inp)?;
    let dpool = pool.to_device(&up.stream)?;
    let mut dring = match ring.as_deref() {
        Some(r) => Some(r.to_device(&up.stream)?),
        None => None,
    };
    let (mut o_dev, ol) = up.out(o)?;
    let parent = match tree {
        Some(t) => Some(up.ints(t.parent())?),
        None => None,
    };
    let plan = {
        let mut ov = o_dev.view_mut(ol.0, ol.1, ol.2, ol.3);
        let parent = parent.as_ref().map(|p| p.as_slice());
        up.stream
            .verify(&t.inputs(), parent, &dpool, layer, &mut ov, dring.as_mut())?
    };
    up.finish_out(&o_dev, o)?;
    if let (Some(h), Some(d)) = (ring, dring) {
        *h = d.to_host(&up.stream)?;
    }
    Ok(plan)
}

/// Kernel VF: [`replayssm::verify_fold`], staged on Cuda (the pool, ring and pending table go up
/// and come back down).
pub fn verify_fold(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    pool: &mut CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    dring: &mut DeferredRing,
    track: Option<Track<'_>>,
) -> Result<VerifyPlan> {
    if backend != Backend::Cuda {
        return replayssm::verify_fold(backend, inp, None, pool, layer, o, dring, track);
    }
    let plan = replayssm::kernels::verify::validate_verify(backend, inp, pool, layer, o, Some(dring.ring()))?;
    replayssm::kernels::verify_fold::check_verify_fold(&plan, pool, dring, track.as_ref())?;
    let up = Up::new()?;
    let t = up.tokens(inp)?;
    let mut dpool = pool.to_device(&up.stream)?;
    let mut dd = dring.to_device(&up.stream, &dpool)?;
    let tr = track_up(&up, track)?;
    let (mut o_dev, ol) = up.out(o)?;
    let plan = {
        let mut ov = o_dev.view_mut(ol.0, ol.1, ol.2, ol.3);
        up.stream
            .verify_fold(&t.inputs(), None, &mut dpool, layer, &mut ov, &mut dd, track_view(&tr))?
    };
    up.finish_out(&o_dev, o)?;
    dpool.download(&up.stream, pool.state_mut())?;
    *dring = dd.to_host(&up.stream, pool)?;
    Ok(plan)
}

/// The deferred fold's flush ([`DeferredRing::flush`]), staged on Cuda: pool and pending table
/// up, [`Stream::defer_flush`] (gather, F, reset), both back down.
pub fn defer_flush(backend: Backend, pool: &mut CheckpointPool, dring: &mut DeferredRing, slots: &[i32]) -> Result<()> {
    if backend != Backend::Cuda {
        return dring.flush(backend, pool, slots);
    }
    let up = Up::new()?;
    let mut dpool = pool.to_device(&up.stream)?;
    let mut dd = dring.to_device(&up.stream, &dpool)?;
    let s = up.ints(slots)?;
    let mut scratch = DeviceVec::<i32>::zeros(Backend::Cuda, slots.len() * dring.window())?;
    up.stream
        .defer_flush(&mut dpool, &mut dd, s.as_slice(), scratch.as_mut_slice())?;
    up.stream.check_errors()?;
    dpool.download(&up.stream, pool.state_mut())?;
    *dring = dd.to_host(&up.stream, pool)?;
    Ok(())
}

/// The device copies of a fold's or replay's pool and ring.
fn state_up(up: &Up, pool: &CheckpointPool, ring: &SpecRing) -> Result<(CheckpointPool<Device>, SpecRing<Device>)> {
    Ok((pool.to_device(&up.stream)?, ring.to_device(&up.stream)?))
}

fn track_up(up: &Up, track: Option<Track<'_>>) -> Result<Option<(DeviceVec<i32>, DeviceVec<i32>)>> {
    match track {
        Some(t) => Ok(Some((up.ints(t.slots)?, up.ints(t.steps)?))),
        None => Ok(None),
    }
}

fn track_view(t: &Option<(DeviceVec<i32>, DeviceVec<i32>)>) -> Option<Track<'_, Device>> {
    t.as_ref().map(|(s, st)| Track {
        slots: s.as_slice(),
        steps: st.as_slice(),
    })
}

/// Kernel F (FT with [`Accepted::Paths`]): [`replayssm::fold`], staged on Cuda.
pub fn fold<'a>(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    accepted: impl Into<Accepted<'a>>,
    track: Option<Track<'_>>,
) -> Result<()> {
    let accepted = accepted.into();
    if backend != Backend::Cuda {
        return replayssm::fold(backend, pool, ring, slots, accepted, track);
    }
    replayssm::kernels::fold::validate_fold(backend, pool, ring, slots, accepted, track)?;
    let up = Up::new()?;
    let (mut dpool, dring) = state_up(&up, pool, ring)?;
    let (s, t) = (up.ints(slots)?, track_up(&up, track)?);
    let (ints, width) = match accepted {
        Accepted::Lens(lens) => (up.ints(lens)?, None),
        Accepted::Paths(p) => (up.ints(p.as_slice())?, Some(p.width())),
    };
    let a = match width {
        None => DeviceAccepted::Lens(ints.as_slice()),
        Some(width) => DeviceAccepted::Paths {
            paths: ints.as_slice(),
            width,
        },
    };
    up.stream.fold(&mut dpool, &dring, s.as_slice(), a, track_view(&t))?;
    up.stream.check_errors()?;
    dpool.download(&up.stream, pool.state_mut())
}

/// Kernel P: [`replayssm::replay`], staged on Cuda.
pub fn replay(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    layer: usize,
    slots: &[i32],
    counts: &[i32],
) -> Result<()> {
    if backend != Backend::Cuda {
        return replayssm::replay(backend, pool, ring, layer, slots, counts);
    }
    replayssm::kernels::replay::validate_replay(backend, pool, ring, layer, slots, counts)?;
    let up = Up::new()?;
    let (mut dpool, dring) = state_up(&up, pool, ring)?;
    let (s, c) = (up.ints(slots)?, up.ints(counts)?);
    up.stream
        .replay(&mut dpool, &dring, layer, s.as_slice(), c.as_slice())?;
    up.stream.check_errors()?;
    dpool.download(&up.stream, pool.state_mut())
}

/// Kernel D: [`replayssm::decode`], staged on Cuda (the cursors stay on the host ring: D does
/// not move them).
pub fn decode(
    backend: Backend,
    inp: &DecodeInputs<'_>,
    pool: &mut CheckpointPool,
    ring: &mut DecodeRing,
    step: &DecodeStep,
    layer: usize,
    o: &mut ActViewMut<'_>,
) -> Result<()> {
    if backend != Backend::Cuda {
        return replayssm::decode(backend, inp, pool, ring, step, layer, o);
    }
    replayssm::kernels::decode::validate_decode(backend, inp, pool, ring, step, layer, o)?;
    let up = Up::new()?;
    let mut dpool = pool.to_device(&up.stream)?;
    let mut dring = ring.to_device(&up.stream, &dpool)?;
    let (slots, pos, flush) = (
        up.ints(step.slots())?,
        up.ints(step.positions())?,
        up.ints(step.force_flush())?,
    );
    let (q, k, v, gate) = (up.act(&inp.q)?, up.act(&inp.k)?, up.act(&inp.v)?, up.gate(&inp.gate)?);
    let dinp = DecodeInputs::<Device> {
        variant: inp.variant,
        dims: inp.dims,
        q: view(&q.0, q.1),
        k: view(&k.0, k.1),
        v: view(&v.0, v.1),
        gate: gate_view(&gate),
        scale: inp.scale,
        qk_l2norm: inp.qk_l2norm,
    };
    let rows = DecodeRows {
        slots: slots.as_slice(),
        positions: pos.as_slice(),
        force_flush: Some(flush.as_slice()),
    };
    let (mut o_dev, ol) = up.out(o)?;
    up.stream.decode(
        &dinp,
        &mut dpool,
        &mut dring,
        &rows,
        layer,
        &mut o_dev.view_mut(ol.0, ol.1, ol.2, ol.3),
    )?;
    up.finish_out(&o_dev, o)?;
    dpool.download(&up.stream, pool.state_mut())?;
    dring.download_into(&up.stream, ring)
}

/// [`replayssm::materialize`], staged on Cuda.
pub fn materialize(backend: Backend, pool: &mut CheckpointPool, ring: &mut DecodeRing, slots: &[i32]) -> Result<()> {
    if backend != Backend::Cuda {
        return replayssm::materialize(backend, pool, ring, slots);
    }
    replayssm::kernels::decode::validate_materialize(backend, pool, ring, slots)?;
    let up = Up::new()?;
    let mut dpool = pool.to_device(&up.stream)?;
    let mut dring = ring.to_device(&up.stream, &dpool)?;
    let s = up.ints(slots)?;
    let mut scratch = DeviceVec::<i32>::zeros(Backend::Cuda, 2 * slots.len())?;
    up.stream
        .materialize(&mut dpool, &mut dring, s.as_slice(), scratch.as_mut_slice())?;
    up.stream.check_errors()?;
    dpool.download(&up.stream, pool.state_mut())?;
    dring.download_into(&up.stream, ring)
}
