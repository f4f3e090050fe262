"""Report sections: each module turns one audit result into a fairvision.report.Section."""
