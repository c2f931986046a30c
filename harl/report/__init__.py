"""What a run tells people (progress, summary table) and machines (history.csv, report.json)."""
