"""GLUE (and your own task) fine-tuning of an export: tasks, metrics, one cell, the grid."""
