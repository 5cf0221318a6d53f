"""The production stack (marker `production`) and the deploy/ files."""
