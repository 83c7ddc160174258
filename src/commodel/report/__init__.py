"""Human-facing output: text tables and plots. No model logic lives here."""
