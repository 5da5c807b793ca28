//! Line charts to SVG and PNG with plotters. The PNG renderer uses the
//! DejaVu Sans font compiled into the binary, so plots work on a machine
//! without fontconfig or any installed font.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// DejaVu Sans (Bitstream Vera license, see assets/DejaVuSans.LICENSE).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points (x, y), drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Draw markers at the points as well as the line.
    pub markers: bool,
    /// Dashed style (e.g. for a ceiling or reference line).
    pub dashed: bool,
}

impl Series {
    /// A solid line with markers.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), points, markers: true, dashed: false }
    }

    /// A dashed line without markers (a reference such as the link ceiling).
    pub fn reference(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), points, markers: false, dashed: true }
    }
}

/// A chart: title, axes and series; the y axis starts at zero.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (base 2 ticks, e.g. for N).
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// A second y axis (right) with its label and series, e.g. N over time.
    pub right: Option<(String, Vec<Series>)>,
}

fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Failing to register leaves PNG text blank; SVG is unaffected.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn bounds(series: &[Series], log_x: bool) -> ((f64, f64), f64) {
    let pts = || series.iter().flat_map(|s| s.points.iter().copied());
    let xmin = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pts().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts().map(|p| p.1).fold(0.0, f64::max);
    let (xmin, xmax) = if xmin.is_finite() { (xmin, xmax) } else { (0.0, 1.0) };
    let (xmin, xmax) = if log_x { (xmin.max(1e-9).log2(), xmax.max(1e-9).log2()) } else { (xmin, xmax) };
    let xmax = if xmax > xmin { xmax } else { xmin + 1.0 };
    ((xmin, xmax), if ymax > 0.0 { ymax * 1.1 } else { 1.0 })
}

fn draw<DB: DrawingBackend>(
    chart: &Chart,
    root: DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ((x0, x1), ymax) = bounds(&chart.series, chart.log_x);
    let log_x = chart.log_x;
    let tx = move |x: f64| if log_x { x.max(1e-9).log2() } else { x };
    let mut b = ChartBuilder::on(&root);
    b.caption(&chart.title, ("sans-serif", 22)).margin(12).x_label_area_size(40).y_label_area_size(60);
    if chart.right.is_some() {
        b.right_y_label_area_size(50);
    }
    let c = b.build_cartesian_2d(x0..x1, 0.0..ymax).map_err(|e| e.to_string())?;
    let right_max = chart.right.as_ref().map(|(_, s)| bounds(s, log_x).1).unwrap_or(1.0);
    let mut c = c.set_secondary_coord(x0..x1, 0.0..right_max);
    c.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(if log_x { (x1 - x0).ceil() as usize + 1 } else { 10 })
        .x_label_formatter(&|x| match (log_x, (x - x.round()).abs() < 0.01) {
            (true, true) => format!("{}", 2f64.powf(x.round())),
            (true, false) => String::new(),
            (false, _) => format!("{x}"),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    if let Some((label, _)) = &chart.right {
        c.configure_secondary_axes()
            .y_desc(label)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    for (i, s) in chart.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        let style = ShapeStyle::from(&color).stroke_width(2);
        let anno = if s.dashed {
            c.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style)).map_err(|e| e.to_string())?
        } else {
            c.draw_series(LineSeries::new(pts.clone(), style)).map_err(|e| e.to_string())?
        };
        anno.label(&s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        if s.markers {
            c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    if let Some((_, series)) = &chart.right {
        for (j, s) in series.iter().enumerate() {
            let color = PALETTE[(chart.series.len() + j) % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
            c.draw_secondary_series(LineSeries::new(pts, ShapeStyle::from(&color).stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(&s.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Writes `chart` to `stem.svg` and `stem.png` (960 x 600).
///
/// # Errors
/// A message from the drawing backend or the file system.
pub fn write(chart: &Chart, stem: &Path) -> Result<(), String> {
    register();
    let svg = stem.with_extension("svg");
    draw(chart, SVGBackend::new(&svg, (960, 600)).into_drawing_area())?;
    let png = stem.with_extension("png");
    draw(chart, BitMapBackend::new(&png, (960, 600)).into_drawing_area())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png_with_text() {
        let dir = std::env::temp_dir().join(format!("wanblk-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chart = Chart {
            title: "goodput vs N".into(),
            x_label: "N".into(),
            y_label: "Mbit/s".into(),
            log_x: true,
            series: vec![
                Series::new("wanblk", vec![(1.0, 100.0), (2.0, 190.0), (4.0, 350.0), (8.0, 340.0)]),
                Series::reference("ceiling", vec![(1.0, 400.0), (8.0, 400.0)]),
            ],
            right: Some(("N".into(), vec![Series::new("N", vec![(1.0, 1.0), (8.0, 8.0)])])),
        };
        let stem = dir.join("chart");
        write(&chart, &stem).unwrap();
        let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
        assert!(svg.contains("goodput vs N") && svg.contains("ceiling"));
        let png = std::fs::read(stem.with_extension("png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        if std::env::var_os("WANBLK_KEEP_PLOT").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
