"""Plans: island-aware candidates (candidates), prediction and ranking (search), words from numbers (explain)."""
