//! `cfctl top`'s screen: the drops by origin, the entries and the
//! addresses dropped most, redrawn in place on the terminal's alternate
//! screen (ratatui over crossterm), until q, Esc or Ctrl-C.

use std::time::Duration;

use cfctl::drops::report::{DropReport, Figures};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};

/// The terminal, in raw mode on its alternate screen until
/// [`Screen::close`].
pub struct Screen {
    terminal: DefaultTerminal,
}

impl Screen {
    /// Takes the terminal over and shows that the first figures come.
    pub fn open() -> anyhow::Result<Self> {
        let mut terminal = ratatui::try_init()?;
        terminal.draw(|frame| {
            frame.render_widget(
                Paragraph::new("cfctl top: reading the sampled drops... (q quits)"),
                frame.area(),
            )
        })?;
        Ok(Self { terminal })
    }

    /// Whether q, Esc or Ctrl-C was pressed since the last call.
    pub fn quit_pressed(&mut self) -> anyhow::Result<bool> {
        while event::poll(Duration::ZERO)? {
            if let Event::Key(key) = event::read()? {
                let ctrl_c =
                    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                if key.kind == KeyEventKind::Press
                    && (ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc))
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Redraws the view of `report`.
    pub fn draw(&mut self, report: &DropReport) -> anyhow::Result<()> {
        self.terminal.draw(|frame| draw(frame, report))?;
        Ok(())
    }

    /// Gives the terminal back.
    pub fn close(self) {
        drop(self.terminal);
        ratatui::restore();
    }
}

fn draw(frame: &mut Frame, report: &DropReport) {
    let [title, origins, entries, addresses] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Percentage(30),
        Constraint::Percentage(35),
        Constraint::Percentage(35),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(format!(
            "cfctl top: {} sampled drops attributed (q quits)",
            report.sampled
        )),
        title,
    );
    let header = |cells: [&'static str; 4]| {
        Row::new(cells).style(Style::default().add_modifier(Modifier::BOLD))
    };
    let widths = [
        Constraint::Percentage(40),
        Constraint::Percentage(20),
        Constraint::Percentage(20),
        Constraint::Percentage(20),
    ];
    let origin_rows = report.origins.iter().map(|row| {
        Row::new([
            row.origin.clone(),
            format!("{} {}", row.ip_type, row.outcome),
            packets(&row.figures),
            row.figures.sampled.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(origin_rows, widths)
            .header(header(["source", "family", "packets", "sampled"]))
            .block(Block::bordered().title("by source")),
        origins,
    );
    let entry_rows = report.entries.iter().map(|row| {
        Row::new([
            row.entry.to_string(),
            row.sources.join(","),
            packets(&row.figures),
            row.figures.sampled.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(entry_rows, widths)
            .header(header(["entry", "sources", "packets", "sampled"]))
            .block(Block::bordered().title("entries dropping most")),
        entries,
    );
    let address_rows = report.addresses.iter().map(|row| {
        Row::new([
            row.address.to_string(),
            String::new(),
            format!("{:.1}%", row.share * 100.0),
            row.sampled.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(address_rows, widths)
            .header(header(["address", "", "share", "sampled"]))
            .block(Block::bordered().title("addresses dropped most")),
        addresses,
    );
}

/// Estimated packets, whole.
fn packets(figures: &Figures) -> String {
    format!("{:.0}", figures.packets)
}
