//! The drain's chart: requests accepted per second, per worker and in total, with the limit.

use fake_provider::TimelinePoint;

/// An SVG of requests accepted per second, per worker and in total, with the provider limit.
pub fn draw(
    path: &std::path::Path,
    timeline: &[TimelinePoint],
    limit: f64,
    workers: u32,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let last = timeline.iter().map(|p| p.second).max().unwrap_or(0) + 1;
    let mut total = vec![0u64; last as usize];
    let mut throttled = vec![0u64; last as usize];
    let mut per_worker: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for p in timeline {
        total[p.second as usize] += p.accepted;
        throttled[p.second as usize] += p.throttled;
        per_worker
            .entry(p.worker.as_str())
            .or_insert_with(|| vec![0; last as usize])[p.second as usize] += p.accepted;
    }
    let top = (*total.iter().max().unwrap_or(&1) as f64).max(limit) * 1.15;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("requests accepted per second — {workers} workers, provider limit {limit}/s"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0u64..last, 0f64..top)?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("requests/s")
        .draw()?;
    let series = |v: &Vec<u64>| {
        v.iter()
            .enumerate()
            .map(|(i, n)| (i as u64, *n as f64))
            .collect::<Vec<_>>()
    };
    c.draw_series(LineSeries::new(series(&total), BLACK.stroke_width(2)))?
        .label("total")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    if limit > 0.0 {
        c.draw_series(LineSeries::new(
            vec![(0, limit), (last, limit)],
            RED.stroke_width(1),
        ))?
        .label("provider limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    if throttled.iter().any(|n| *n > 0) {
        c.draw_series(LineSeries::new(series(&throttled), MAGENTA))?
            .label("429s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    }
    for (i, (name, v)) in per_worker.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(series(v), color))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
