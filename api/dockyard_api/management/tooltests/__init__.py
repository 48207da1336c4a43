"""Management: tool test calls."""
