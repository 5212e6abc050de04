"""Configuration file handling shared by every mbde YAML reader."""
