//! `replayssm bench --plot FILE.png`: percent of floor against batch, one panel per model shape,
//! one line per kernel (and the derived D cycle and spec step), at one window T. Drawn into an
//! RGB buffer with a built-in 5x7 font and written with the `png` crate: no font files, no
//! plotting stack.

use std::collections::BTreeMap;

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

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Canvas {
        Canvas {
            w,
            h,
            px: vec![255; w * h * 3],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn rect(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: [u8; 3]) {
        for y in y0..=y1 {
            for x in x0..=x1 {
                self.set(x, y, c);
            }
        }
    }

    /// A line `thick` pixels wide (Bresenham with a square brush); `dash` > 0 draws dashes.
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), thick: i64, c: [u8; 3], dash: i64) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err, mut n) = (x0, y0, dx + dy, 0i64);
        loop {
            if dash == 0 || (n / dash) % 2 == 0 {
                let r = thick / 2;
                self.rect(x - r, y - r, x - r + thick - 1, y - r + thick - 1, c);
            }
            n += 1;
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text at (x, y) (top left), `scale` pixels per font pixel; returns the width drawn.
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: [u8; 3]) -> i64 {
        let mut cx = x;
        for ch in s.chars() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        let (px, py) = (cx + col * scale, y + row as i64 * scale);
                        self.rect(px, py, px + scale - 1, py + scale - 1, c);
                    }
                }
            }
            cx += 6 * scale;
        }
        cx - x
    }

    fn png(&self) -> Result<Vec<u8>, String> {
        let mut out = vec![];
        let mut enc = png::Encoder::new(&mut out, self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(&self.px).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
        Ok(out)
    }
}

fn text_width(s: &str, scale: i64) -> i64 {
    s.chars().count() as i64 * 6 * scale
}

/// 5x7 glyphs, one byte per row (bit 4 = leftmost column); lower case is drawn as upper case.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '=' => [0, 0, 0x1F, 0, 0x1F, 0, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        ',' => [0, 0, 0, 0, 0x0C, 0x04, 0x08],
        ':' => [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0x1F],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        ' ' => [0; 7],
        _ => [0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F],
    }
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
    let colour = |k: &str| PALETTE[kernels.iter().position(|x| *x == k).unwrap_or(0) % PALETTE.len()];
    let panels_y = shapes.len().div_ceil(2).max(1);
    let h = TOP + panels_y * PANEL_H + LEGEND_H;
    let mut cv = Canvas::new(W, h);
    let black = [0, 0, 0];
    let grey = [200, 200, 200];
    let title = match &report.device {
        Some(d) => format!(
            "PERCENT OF BYTES FLOOR, T = {t}, {} ({} BACKEND)",
            d.name, report.backend
        ),
        None => format!("PERCENT OF BYTES FLOOR, T = {t} ({} BACKEND)", report.backend),
    };
    cv.text(20, 14, &title, 3, black);
    let ymax = rows
        .iter()
        .filter_map(|r| r.percent_of_floor)
        .fold(100.0f64, f64::max)
        .min(400.0);
    let ymax = (ymax / 20.0).ceil() * 20.0;
    for (i, shape) in shapes.iter().enumerate() {
        let (px, py) = ((i % 2 * PANEL_W + 30) as i64, (TOP + i / 2 * PANEL_H) as i64);
        let (x0, y0, x1, y1) = (px + 60, py + 40, px + PANEL_W as i64 - 30, py + PANEL_H as i64 - 50);
        cv.text(px + 60, py + 12, shape, 2, black);
        // Grid and y labels every 20 %, the floor itself (100 %) dashed.
        let ypos = |p: f64| y1 - ((p.min(ymax) / ymax) * (y1 - y0) as f64).round() as i64;
        let mut p = 0.0;
        while p <= ymax + 1e-9 {
            let y = ypos(p);
            if (p - 100.0).abs() < 1e-9 {
                cv.line((x0, y), (x1, y), 1, black, 6);
            } else {
                cv.line((x0, y), (x1, y), 1, grey, 0);
            }
            let label = format!("{p:.0}%");
            cv.text(x0 - 8 - text_width(&label, 2), y - 7, &label, 2, black);
            p += 20.0;
        }
        cv.line((x0, y0), (x0, y1), 2, black, 0);
        cv.line((x0, y1), (x1, y1), 2, black, 0);
        // x: log2 of the batch, the batches of the run as ticks.
        let (lo, hi) = (
            (*batches.first().unwrap_or(&1) as f64).log2(),
            (*batches.last().unwrap_or(&1) as f64).log2(),
        );
        let xpos = |b: usize| {
            let f = if hi > lo {
                ((b as f64).log2() - lo) / (hi - lo)
            } else {
                0.5
            };
            x0 + 10 + (f * (x1 - x0 - 20) as f64).round() as i64
        };
        for &b in &batches {
            let x = xpos(b);
            cv.line((x, y1), (x, y1 + 6), 2, black, 0);
            let label = b.to_string();
            cv.text(x - text_width(&label, 2) / 2, y1 + 12, &label, 2, black);
        }
        cv.text(x1 - text_width("B", 2), y1 + 32, "B", 2, black);
        let s = series(&rows, shape, t);
        if s.is_empty() {
            let msg = if report.copy_bandwidth.is_none() {
                "NOT TIMED (NO GPU)"
            } else {
                "NO TIMED CASES"
            };
            cv.text(x0 + 30, (y0 + y1) / 2 - 10, msg, 3, [180, 0, 0]);
        }
        for (k, pts) in &s {
            let c = colour(k);
            for w in pts.windows(2) {
                cv.line((xpos(w[0].0), ypos(w[0].1)), (xpos(w[1].0), ypos(w[1].1)), 3, c, 0);
            }
            for &(b, p) in pts {
                let (x, y) = (xpos(b), ypos(p));
                cv.rect(x - 4, y - 4, x + 4, y + 4, c);
            }
        }
    }
    // Legend.
    let mut lx = 40i64;
    let ly = (TOP + panels_y * PANEL_H + 20) as i64;
    for k in &kernels {
        cv.rect(lx, ly, lx + 24, ly + 14, colour(k));
        lx += 32 + cv.text(lx + 32, ly, k, 2, black) + 24;
    }
    cv.png()
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
