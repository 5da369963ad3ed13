//! The drain's chart: requests the provider accepted per second, each worker's part stacked on
//! the one below (so every worker is visible and the top edge is the total), the provider's
//! limit as a dashed line, 429s if any, the legend beside the plot, and a title that states the
//! run's headline figure, the same as the summary's.

use std::collections::BTreeMap;

use fake_provider::TimelinePoint;
use plotters::prelude::*;

/// Draws `timeline` to `path` (SVG) under `title`.
pub fn draw(
    path: &std::path::Path,
    timeline: &[TimelinePoint],
    limit: f64,
    title: &str,
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let seconds = timeline.iter().map(|p| p.second).max().unwrap_or(0) as usize + 1;
    let mut throttled = vec![0u64; seconds];
    let mut per_worker: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for p in timeline {
        throttled[p.second as usize] += p.throttled;
        per_worker
            .entry(p.worker.as_str())
            .or_insert_with(|| vec![0; seconds])[p.second as usize] += p.accepted;
    }
    let total: Vec<u64> = (0..seconds)
        .map(|s| per_worker.values().map(|v| v[s]).sum())
        .collect();
    let top = (*total.iter().max().unwrap_or(&1) as f64).max(limit) * 1.12;

    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, side) = root.split_horizontally(880);
    let mut c = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 17))
        .margin(14)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..seconds as f64, 0f64..top)?;
    c.configure_mesh()
        .x_desc("seconds since the provider started")
        .y_desc("requests accepted per second (each counts against the limit)")
        .draw()?;
    let mut legend: Vec<(String, RGBColor, bool)> = Vec::new();
    let mut below = vec![0f64; seconds];
    for (i, (name, v)) in per_worker.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let above: Vec<f64> = below.iter().zip(v).map(|(b, n)| b + *n as f64).collect();
        let mut band: Vec<(f64, f64)> = (0..seconds).map(|s| (s as f64, above[s])).collect();
        band.extend((0..seconds).rev().map(|s| (s as f64, below[s])));
        c.draw_series(std::iter::once(Polygon::new(
            band,
            color.mix(0.55).filled(),
        )))?;
        // The legend's swatch is the band's colour as it shows on white.
        let on_white = |c: u8| (f64::from(c) * 0.55 + 255.0 * 0.45) as u8;
        let swatch = RGBColor(on_white(color.0), on_white(color.1), on_white(color.2));
        legend.push((name.to_string(), swatch, false));
        below = above;
    }
    let line = |v: &[u64]| {
        (0..seconds)
            .map(|s| (s as f64, v[s] as f64))
            .collect::<Vec<_>>()
    };
    c.draw_series(LineSeries::new(line(&total), BLACK.stroke_width(2)))?;
    legend.push(("total".into(), BLACK, false));
    if limit > 0.0 {
        let edge = vec![(0.0, limit), (seconds as f64, limit)];
        c.draw_series(DashedLineSeries::new(edge, 10, 6, RED.stroke_width(2)))?;
        legend.push((format!("provider limit {limit}/s"), RED, true));
    }
    if throttled.iter().any(|n| *n > 0) {
        c.draw_series(LineSeries::new(line(&throttled), MAGENTA.stroke_width(2)))?;
        legend.push(("429 answers".into(), MAGENTA, false));
    }
    draw_legend(&side, &legend)?;
    root.present()?;
    Ok(())
}

/// The legend, beside the plot (never over the ramps): a swatch and a label per series.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, RGBColor, bool)],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 14).into_font();
    area.draw(&Text::new(
        "legend",
        (8, 48),
        font.clone().style(FontStyle::Bold),
    ))?;
    for (i, (label, color, dashed)) in entries.iter().enumerate() {
        let y = 76 + 24 * i as i32;
        if *dashed {
            for x in [8, 20] {
                area.draw(&PathElement::new(
                    vec![(x, y + 6), (x + 8, y + 6)],
                    color.stroke_width(2),
                ))?;
            }
        } else {
            area.draw(&Rectangle::new([(8, y), (28, y + 12)], color.filled()))?;
        }
        area.draw(&Text::new(label.clone(), (36, y), font.clone()))?;
    }
    Ok(())
}
