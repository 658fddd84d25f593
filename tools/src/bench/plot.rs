//! `replayssm bench --plot FILE.png`: percent of floor against batch, one panel per model shape,
//! one line per kernel (and the derived D cycle and spec step), at one window T. Drawn with
//! `plotters` into an RGB buffer (text in the bundled DejaVu Sans, `tools/assets/`, so no system
//! font is needed) and written with the `png` crate.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::report::{Report, Row};

const W: usize = 1400;
const PANEL_W: usize = 680;
const PANEL_H: usize = 400;
const TOP: usize = 50;
const LEGEND_H: usize = 70;

/// Line colours, one per series in order of appearance.
pub const PALETTE: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// The notice of a panel with nothing timed.
const NOTICE: RGBColor = RGBColor(180, 0, 0);

/// DejaVu Sans (Bitstream Vera licence: `tools/assets/DejaVuSans.LICENSE`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

fn font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the bundled font does not parse".to_string())
        })
        .clone()
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the plot: {e}")
}

/// The series of one panel: kernel -> (batch, percent of floor), at window `t`.
fn series<'a>(rows: &'a [Row], shape: &str, t: usize) -> BTreeMap<&'a str, Vec<(usize, f64)>> {
    let mut m: BTreeMap<&str, Vec<(usize, f64)>> = BTreeMap::new();
    // The unwindowed kernels (R-decode, copy: T = 1) belong to every window's plot.
    for r in rows.iter().filter(|r| r.shape == shape && (r.t == t || r.t == 1)) {
        if let Some(p) = r.percent_of_floor {
            m.entry(r.kernel.as_str()).or_default().push((r.batch, p));
        }
    }
    for v in m.values_mut() {
        v.sort_by_key(|x| x.0);
    }
    m
}

/// Renders the plot of `report` at window `t` as PNG bytes.
pub fn render(report: &Report, t: usize) -> Result<Vec<u8>, String> {
    font()?;
    let rows = report.rows();
    let mut shapes: Vec<&str> = vec![];
    for r in &rows {
        if !shapes.contains(&r.shape) {
            shapes.push(r.shape);
        }
    }
    let mut batches: Vec<usize> = rows.iter().map(|r| r.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    // One colour per kernel name across every panel.
    let mut kernels: Vec<&str> = vec![];
    for r in &rows {
        if r.percent_of_floor.is_some() && !kernels.contains(&r.kernel.as_str()) {
            kernels.push(r.kernel.as_str());
        }
    }
    let colour = |k: &str| rgb(PALETTE[kernels.iter().position(|x| *x == k).unwrap_or(0) % PALETTE.len()]);
    let panels_y = shapes.len().div_ceil(2).max(1);
    let h = TOP + panels_y * PANEL_H + LEGEND_H;
    let mut buf = vec![0u8; W * h * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W as u32, h as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let title = match &report.device {
            Some(d) => format!(
                "Percent of bytes floor, T = {t}, {} ({} backend)",
                d.name, report.backend
            ),
            None => format!("Percent of bytes floor, T = {t} ({} backend)", report.backend),
        };
        root.draw(&Text::new(title, (20, 12), ("sans-serif", 26).into_font()))
            .map_err(err)?;
        let ymax = rows
            .iter()
            .filter_map(|r| r.percent_of_floor)
            .fold(100.0f64, f64::max)
            .min(400.0);
        let ymax = (ymax / 20.0).ceil() * 20.0;
        // x: log2 of the batch (the batches are powers of two), a little room either side.
        let (lo, hi) = (
            (*batches.first().unwrap_or(&1) as f64).log2(),
            (*batches.last().unwrap_or(&1) as f64).log2(),
        );
        let (xlo, xhi) = (lo - 0.3, hi.max(lo + 1.0) + 0.3);
        for (i, shape) in shapes.iter().enumerate() {
            let (px, py) = ((i % 2 * PANEL_W + 30) as i32, (TOP + i / 2 * PANEL_H) as i32);
            let panel = root.clone().shrink((px, py), (PANEL_W as u32 - 10, PANEL_H as u32));
            let mut chart = ChartBuilder::on(&panel)
                .caption(*shape, ("sans-serif", 20))
                .margin_right(30)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(xlo..xhi, 0.0..ymax)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("B")
                .x_labels(((hi - lo) as usize + 2).min(12))
                .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
                .y_labels((ymax / 20.0) as usize + 1)
                .y_label_formatter(&|p| format!("{p:.0}%"))
                .label_style(("sans-serif", 16))
                .draw()
                .map_err(err)?;
            // The floor itself, dashed.
            chart
                .draw_series(DashedLineSeries::new(
                    [(xlo, 100.0), (xhi, 100.0)],
                    8,
                    6,
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?;
            let s = series(&rows, shape, t);
            if s.is_empty() {
                let msg = if report.copy_bandwidth.is_none() {
                    "not timed (no GPU)"
                } else {
                    "no timed cases"
                };
                panel
                    .draw(&Text::new(
                        msg,
                        (PANEL_W as i32 / 3, PANEL_H as i32 / 2 - 10),
                        ("sans-serif", 28).into_font().color(&NOTICE),
                    ))
                    .map_err(err)?;
            }
            for (k, pts) in &s {
                let c = colour(k);
                let pts: Vec<(f64, f64)> = pts.iter().map(|&(b, p)| ((b as f64).log2(), p.min(ymax))).collect();
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(3)))
                    .map_err(err)?;
                chart
                    .draw_series(
                        pts.iter()
                            .map(|&p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], c.filled())),
                    )
                    .map_err(err)?;
            }
        }
        // Legend.
        let mut lx = 40i32;
        let ly = (TOP + panels_y * PANEL_H + 20) as i32;
        let style = TextStyle::from(("sans-serif", 18).into_font());
        for k in &kernels {
            root.draw(&Rectangle::new([(lx, ly), (lx + 24, ly + 14)], colour(k).filled()))
                .map_err(err)?;
            let (tw, _) = root.estimate_text_size(k, &style).map_err(err)?;
            root.draw(&Text::new(k.to_string(), (lx + 32, ly - 2), style.clone()))
                .map_err(err)?;
            lx += 32 + tw as i32 + 24;
        }
        root.present().map_err(err)?;
    }
    png_bytes(&buf, W, h)
}

/// An RGB buffer as PNG bytes.
fn png_bytes(rgb: &[u8], w: usize, h: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![];
    {
        let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().map_err(|e| format!("encoding the plot: {e}"))?;
        wr.write_image_data(rgb)
            .map_err(|e| format!("encoding the plot: {e}"))?;
        wr.finish().map_err(|e| format!("encoding the plot: {e}"))?;
    }
    Ok(out)
}

/// Renders and writes the plot.
pub fn write(report: &Report, t: usize, path: &std::path::Path) -> Result<(), String> {
    let bytes = render(report, t)?;
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{floor_bytes, Case, CaseResult, Kernel, Outcome, TINY_SHAPE};
    use replayssm::backend::Backend;
    use replayssm::dtype::DType;

    fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(png_bytes);
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    fn has_colour(px: &[u8], c: [u8; 3]) -> usize {
        px.chunks(3).filter(|p| *p == c).count()
    }

    fn report(timed: bool) -> Report {
        let results = [1usize, 8, 64]
            .iter()
            .map(|&b| {
                let case = Case {
                    kernel: Kernel::V,
                    shape: TINY_SHAPE,
                    batch: b,
                    t: 4,
                    dtype: DType::BF16,
                };
                let us = crate::floor::floor_us(floor_bytes(&case), 4e12) * 2.0;
                let mut r = CaseResult::timed_at(case, us);
                if !timed {
                    r.outcome = Outcome::Ran;
                }
                r
            })
            .collect();
        Report {
            backend: if timed { Backend::Cuda } else { Backend::Emulated },
            device: None,
            copy_bandwidth: timed.then_some(4e12),
            no_timing_reason: None,
            results,
        }
    }

    #[test]
    fn the_plot_draws_each_timed_series_in_its_colour() {
        let (w, h, px) = decode(&render(&report(true), 4).unwrap());
        assert_eq!((w as usize, h as usize), (W, TOP + PANEL_H + LEGEND_H));
        // V is the only series: the first colour, drawn as markers, line and legend (>> legend).
        assert!(has_colour(&px, PALETTE[0]) > 1000, "{}", has_colour(&px, PALETTE[0]));
        // Every point sits at 50 % of the floor: the markers' rows are all the same.
        let rows: Vec<usize> = px
            .chunks(3)
            .enumerate()
            .filter(|(_, p)| *p == PALETTE[0])
            .map(|(i, _)| i / W)
            .collect();
        let in_panel: Vec<_> = rows.iter().filter(|&&y| y < TOP + PANEL_H).collect();
        let (lo, hi) = (**in_panel.iter().min().unwrap(), **in_panel.iter().max().unwrap());
        assert!(hi - lo <= 9, "a flat series spans rows {lo}..{hi}");
    }

    /// Three kernels (and the derived step) over two shapes; `REPLAYSSM_PLOT_SAMPLE=x.png` keeps the picture to look at.
    #[test]
    fn several_kernels_and_shapes_get_a_colour_each() {
        use crate::bench::TINY_KDA_SHAPE;
        let mut results = vec![];
        for shape in [TINY_SHAPE, TINY_KDA_SHAPE] {
            for (i, kernel) in [Kernel::V, Kernel::F, Kernel::DFlush].into_iter().enumerate() {
                for (j, b) in [1usize, 8, 64, 512].into_iter().enumerate() {
                    let case = Case {
                        kernel,
                        shape,
                        batch: b,
                        t: 4,
                        dtype: DType::BF16,
                    };
                    // 10 % at B = 1 rising by 20 % per batch step, offset per kernel.
                    let pct = 10.0 + 20.0 * j as f64 + 5.0 * i as f64;
                    let us = crate::floor::floor_us(floor_bytes(&case), 4e12) * 100.0 / pct;
                    results.push(CaseResult::timed_at(case, us));
                }
            }
        }
        let rep = Report {
            backend: Backend::Cuda,
            device: None,
            copy_bandwidth: Some(4e12),
            no_timing_reason: None,
            results,
        };
        let png_bytes = render(&rep, 4).unwrap();
        if let Some(path) = std::env::var_os("REPLAYSSM_PLOT_SAMPLE") {
            std::fs::write(path, &png_bytes).unwrap();
        }
        let (w, h, px) = decode(&png_bytes);
        assert_eq!((w as usize, h as usize), (W, TOP + PANEL_H + LEGEND_H));
        // V, F, D-flush and the derived V+F step.
        for c in &PALETTE[..4] {
            // Drawn in both panels (left and right halves) and in the legend.
            let xs: Vec<usize> = px
                .chunks(3)
                .enumerate()
                .filter(|(_, p)| *p == c)
                .map(|(i, _)| i % W)
                .collect();
            assert!(xs.iter().any(|&x| x < W / 2) && xs.iter().any(|&x| x >= W / 2), "{c:?}");
        }
        assert_eq!(has_colour(&px, PALETTE[4]), 0, "four series, four colours");
    }

    #[test]
    fn an_untimed_run_draws_no_series() {
        let (_, _, px) = decode(&render(&report(false), 4).unwrap());
        assert_eq!(has_colour(&px, PALETTE[0]), 0);
        assert!(has_colour(&px, [180, 0, 0]) > 0, "the 'not timed' notice");
    }
}
