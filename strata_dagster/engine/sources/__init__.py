"""Sources read through their own change log: transaction ledgers and change feeds."""
