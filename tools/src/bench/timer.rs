//! Device timing: CUDA events around launches after warm-up, the median of many samples, and
//! CUDA-graph replay for short kernels (a graph of many launches hides the launch gaps that
//! would otherwise dominate a few-microsecond kernel). Also the device-to-device copy bandwidth,
//! the denominator of every percent-of-floor.

use std::ffi::c_void;

/// How a case was timed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median over the samples of the time per launch.
    pub median_us: f64,
    /// 10th and 90th percentile per launch (the spread to compare versions against).
    pub p10_us: f64,
    pub p90_us: f64,
    pub samples: usize,
    /// Launches per timed sample (1 without a graph; the graph's length with one).
    pub launches_per_sample: usize,
    pub graph: bool,
}

/// When to replay a captured graph instead of timing direct launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphMode {
    /// Graph replay for kernels under `graph_below_us` (the small batches).
    Auto,
    Always,
    Never,
}

/// Timing knobs.
#[derive(Clone, Copy, Debug)]
pub struct TimingOptions {
    /// Device time spent warming up each case before the samples.
    pub warmup_ms: f64,
    /// Timed samples per case (the median is reported).
    pub samples: usize,
    pub graph: GraphMode,
    /// `Auto`: replay a graph when one launch takes less than this.
    pub graph_below_us: f64,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup_ms: 20.0,
            samples: 30,
            graph: GraphMode::Auto,
            graph_below_us: 50.0,
        }
    }
}

/// Median, p10 and p90 of `xs` (sorted in place).
#[cfg_attr(not(replayssm_cuda), allow(dead_code))]
pub(crate) fn percentiles(xs: &mut [f64]) -> (f64, f64, f64) {
    assert!(!xs.is_empty());
    xs.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    let median = if xs.len() % 2 == 1 {
        xs[xs.len() / 2]
    } else {
        (xs[xs.len() / 2 - 1] + xs[xs.len() / 2]) / 2.0
    };
    (median, at(0.1), at(0.9))
}

/// A launch of input set `set` on `stream`.
#[cfg_attr(not(replayssm_cuda), allow(dead_code))]
pub(crate) type LaunchFn<'a> = dyn FnMut(usize, *mut c_void) -> Result<(), String> + 'a;

#[cfg(replayssm_cuda)]
pub(crate) use device::*;

#[cfg(replayssm_cuda)]
mod device {
    use super::*;
    use replayssm::ffi;

    fn check(call: &str, code: i32) -> Result<(), String> {
        if code == 0 {
            Ok(())
        } else {
            Err(format!(
                "{call} failed: {} ({code})",
                replayssm::cuda::error_string(code)
            ))
        }
    }

    pub(crate) struct Stream(pub *mut c_void);
    impl Stream {
        pub fn new() -> Result<Stream, String> {
            let mut s = std::ptr::null_mut();
            // SAFETY: out-parameter.
            check("cudaStreamCreate", unsafe { ffi::rssm_cuda_stream_create(&mut s) })?;
            Ok(Stream(s))
        }
        pub fn sync(&self) -> Result<(), String> {
            // SAFETY: a live stream.
            check("cudaStreamSynchronize", unsafe {
                ffi::rssm_cuda_stream_synchronize(self.0)
            })
        }
    }
    impl Drop for Stream {
        fn drop(&mut self) {
            // SAFETY: created by rssm_cuda_stream_create, destroyed once.
            unsafe { ffi::rssm_cuda_stream_destroy(self.0) };
        }
    }

    struct Event(*mut c_void);
    impl Event {
        fn new() -> Result<Event, String> {
            let mut e = std::ptr::null_mut();
            // SAFETY: out-parameter.
            check("cudaEventCreate", unsafe { ffi::rssm_cuda_event_create(&mut e) })?;
            Ok(Event(e))
        }
        fn record(&self, s: &Stream) -> Result<(), String> {
            // SAFETY: live event and stream.
            check("cudaEventRecord", unsafe { ffi::rssm_cuda_event_record(self.0, s.0) })
        }
    }
    impl Drop for Event {
        fn drop(&mut self) {
            // SAFETY: created once, destroyed once.
            unsafe { ffi::rssm_cuda_event_destroy(self.0) };
        }
    }

    fn elapsed_ms(a: &Event, b: &Event) -> Result<f64, String> {
        let mut ms = 0f32;
        // SAFETY: both events were recorded and their stream synchronised.
        check("cudaEventElapsedTime", unsafe {
            ffi::rssm_cuda_event_elapsed_ms(&mut ms, a.0, b.0)
        })?;
        Ok(ms as f64)
    }

    struct Graph(*mut c_void);
    impl Drop for Graph {
        fn drop(&mut self) {
            // SAFETY: instantiated once, destroyed once.
            unsafe { ffi::rssm_cuda_graph_exec_destroy(self.0) };
        }
    }

    fn capture(stream: &Stream, launch: &mut LaunchFn<'_>, sets: usize, n: usize) -> Result<Graph, String> {
        // SAFETY: a live stream.
        check("cudaStreamBeginCapture", unsafe {
            ffi::rssm_cuda_graph_begin_capture(stream.0)
        })?;
        let mut result = Ok(());
        for i in 0..n {
            result = launch(i % sets, stream.0);
            if result.is_err() {
                break;
            }
        }
        let mut exec = std::ptr::null_mut();
        // SAFETY: ends the capture begun above, whatever happened inside it.
        let end = check("cudaStreamEndCapture", unsafe {
            ffi::rssm_cuda_graph_end_capture(stream.0, &mut exec)
        });
        result?;
        end?;
        Ok(Graph(exec))
    }

    /// Times `launch` on a fresh stream, rotating over `sets` input sets.
    pub(crate) fn time(launch: &mut LaunchFn<'_>, sets: usize, o: &TimingOptions) -> Result<Timing, String> {
        let stream = Stream::new()?;
        let (e0, e1) = (Event::new()?, Event::new()?);
        // Warm-up in doubling batches until one batch takes warmup_ms: module load and clocks
        // settle, and the last batch estimates one launch.
        let mut batch = 1usize;
        let mut next = 0usize;
        let per_launch_us = loop {
            e0.record(&stream)?;
            for _ in 0..batch {
                launch(next % sets, stream.0)?;
                next += 1;
            }
            e1.record(&stream)?;
            stream.sync()?;
            let ms = elapsed_ms(&e0, &e1)?;
            if ms >= o.warmup_ms || batch >= 1 << 16 {
                break ms * 1e3 / batch as f64;
            }
            batch *= 2;
        };
        let use_graph = match o.graph {
            GraphMode::Always => true,
            GraphMode::Never => false,
            GraphMode::Auto => per_launch_us < o.graph_below_us,
        };
        let samples = o.samples.max(1);
        let mut per = Vec::with_capacity(samples);
        let launches_per_sample;
        if use_graph {
            // About 200 µs of work per replay, and every input set at least once.
            let n = ((200.0 / per_launch_us.max(0.1)).ceil() as usize)
                .min(2000)
                .max(sets.max(1));
            launches_per_sample = n;
            let g = capture(&stream, launch, sets, n)?;
            for _ in 0..2 {
                // SAFETY: a live graph and stream.
                check("cudaGraphLaunch", unsafe { ffi::rssm_cuda_graph_launch(g.0, stream.0) })?;
            }
            let events: Vec<(Event, Event)> = (0..samples)
                .map(|_| Ok((Event::new()?, Event::new()?)))
                .collect::<Result<_, String>>()?;
            for (a, b) in &events {
                a.record(&stream)?;
                // SAFETY: as above.
                check("cudaGraphLaunch", unsafe { ffi::rssm_cuda_graph_launch(g.0, stream.0) })?;
                b.record(&stream)?;
            }
            stream.sync()?;
            for (a, b) in &events {
                per.push(elapsed_ms(a, b)? * 1e3 / n as f64);
            }
        } else {
            launches_per_sample = 1;
            // Enqueue every sample before waiting: the host's checks of launch i+1 overlap the
            // device's work on launch i, so no host gap lands between a pair of events.
            let events: Vec<(Event, Event)> = (0..samples)
                .map(|_| Ok((Event::new()?, Event::new()?)))
                .collect::<Result<_, String>>()?;
            for (a, b) in &events {
                a.record(&stream)?;
                launch(next % sets, stream.0)?;
                next += 1;
                b.record(&stream)?;
            }
            stream.sync()?;
            for (a, b) in &events {
                per.push(elapsed_ms(a, b)? * 1e3);
            }
        }
        let (median_us, p10_us, p90_us) = percentiles(&mut per);
        Ok(Timing {
            median_us,
            p10_us,
            p90_us,
            samples,
            launches_per_sample,
            graph: use_graph,
        })
    }

    /// Device milliseconds of `iters` launches enqueued back to back between two events.
    pub(crate) fn time_iters(launch: &mut LaunchFn<'_>, sets: usize, iters: u64) -> Result<f64, String> {
        let stream = Stream::new()?;
        let (e0, e1) = (Event::new()?, Event::new()?);
        e0.record(&stream)?;
        for i in 0..iters as usize {
            launch(i % sets, stream.0)?;
        }
        e1.record(&stream)?;
        stream.sync()?;
        elapsed_ms(&e0, &e1)
    }

    /// Device-to-device copy bandwidth in bytes per second (bytes read plus bytes written), from
    /// the median of `samples` copies of `bytes` bytes.
    pub(crate) fn copy_bandwidth(bytes: usize, samples: usize) -> Result<f64, String> {
        let src = replayssm::cuda::DeviceBuffer::new(bytes).map_err(|e| e.to_string())?;
        let dst = replayssm::cuda::DeviceBuffer::new(bytes).map_err(|e| e.to_string())?;
        // SAFETY: `bytes` bytes of src; not zeros (METHOD.md), though a copy does not care.
        check("cudaMemset", unsafe {
            ffi::rssm_cuda_memset(src.ptr(), 0x5a, bytes as u64)
        })?;
        let mut copy = |_: usize, s: *mut c_void| {
            // SAFETY: both buffers hold `bytes` bytes and do not overlap.
            check("cudaMemcpyAsync", unsafe {
                ffi::rssm_cuda_memcpy_dtod_async(dst.ptr(), src.ptr(), bytes as u64, s)
            })
        };
        let t = time(
            &mut copy,
            1,
            &TimingOptions {
                warmup_ms: 20.0,
                samples,
                graph: GraphMode::Never,
                graph_below_us: 0.0,
            },
        )?;
        Ok(2.0 * bytes as f64 / (t.median_us * 1e-6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let mut xs = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentiles(&mut xs), (3.0, 1.0, 5.0));
        let mut xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let (m, p10, p90) = percentiles(&mut xs);
        assert_eq!(m, 5.5);
        assert_eq!(p10, 2.0); // index round(0.9) = 1
        assert_eq!(p90, 9.0); // index round(8.1) = 8
    }
}
