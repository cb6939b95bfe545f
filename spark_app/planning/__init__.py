"""Pure planning: splits, admission under the drift bound, offsets."""
