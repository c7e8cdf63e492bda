//! Line plots as SVG (plotters' SVG backend, no font backend: see [`crate::sweep`]): the
//! lines, their look, the axes, and the drawing the sweeps share.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// How a line is drawn: the fluid model's dashed with triangles, the DES's solid with circles,
/// or with hollow squares behind an upstream (hollow markers let a line drawn under another show).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Dashed, with triangles.
    Dashed,
    /// Solid, with filled circles.
    Solid,
    /// Solid, with hollow squares.
    SolidSquares,
    /// Solid, no markers (a time series).
    Plain,
}

/// One plotted line.
pub(crate) struct Line {
    /// The legend label.
    pub label: String,
    /// The colour.
    pub color: RGBColor,
    /// How the line and its markers are drawn.
    pub look: Look,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A plot's axis descriptions and label formats.
pub(crate) struct Axes<'a> {
    /// The x axis description.
    pub x_desc: &'a str,
    /// The y axis description.
    pub y_desc: &'a str,
    /// How x labels are written.
    pub x_format: &'a dyn Fn(&f64) -> String,
    /// How y labels are written.
    pub y_format: &'a dyn Fn(&f64) -> String,
}

/// A log axis's range around every (positive) point of `lines`: a factor of 2 beyond the
/// extremes.
pub(crate) fn log_range(lines: &[Line]) -> Range<f64> {
    let ys = || lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let lo = ys().fold(f64::INFINITY, f64::min);
    let hi = ys().fold(0.0, f64::max);
    if lo.is_finite() && hi > 0.0 {
        lo / 2.0..hi * 2.0
    } else {
        1.0..1000.0
    }
}

/// Draws `lines` into an SVG at `path`.
pub(crate) fn draw<X, Y>(
    path: &Path,
    title: &str,
    x: X,
    y: Y,
    axes: &Axes<'_>,
    lines: &[Line],
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(axes.x_format)
        .y_label_formatter(axes.y_format)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| fail(&e))?;
    for line in lines {
        let color = line.color;
        let style = color.stroke_width(2);
        let points = || line.points.iter().copied();
        // Legend sample: a 24-pixel stretch of the line with a marker in the middle.
        let sample =
            move |at| EmptyElement::at(at) + PathElement::new(vec![(0, 0), (24, 0)], style);
        match line.look {
            Look::Dashed => {
                chart
                    .draw_series(DashedLineSeries::new(points(), 8, 5, style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| {
                        EmptyElement::at(at)
                            + DashedPathElement::new(vec![(0, 0), (24, 0)], 6, 4, style)
                            + TriangleMarker::new((12, 0), 5, style)
                    });
                chart
                    .draw_series(points().map(|p| TriangleMarker::new(p, 5, style)))
                    .map_err(|e| fail(&e))?;
            }
            Look::Solid => {
                chart
                    .draw_series(LineSeries::new(points(), style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| sample(at) + Circle::new((12, 0), 3, color.filled()));
                chart
                    .draw_series(points().map(|p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| fail(&e))?;
            }
            Look::Plain => {
                chart
                    .draw_series(LineSeries::new(points(), color.stroke_width(1)))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(sample);
            }
            Look::SolidSquares => {
                let square = move || Rectangle::new([(-5, -5), (5, 5)], style);
                chart
                    .draw_series(LineSeries::new(points(), style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| sample(at) + Rectangle::new([(7, -5), (17, 5)], style));
                chart
                    .draw_series(points().map(|p| EmptyElement::at(p) + square()))
                    .map_err(|e| fail(&e))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
