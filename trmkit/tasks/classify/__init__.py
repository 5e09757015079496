"""Classification, for any classify task: metrics.py (F1, confusion, bootstrap, calibration; numpy only)
and scorer.py (ClassifyScorer and the run directory's classification and calibration files)."""
