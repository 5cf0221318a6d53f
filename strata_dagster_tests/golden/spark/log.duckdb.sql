SELECT log(amount) AS log10, log(2, amount) AS log2 FROM raw.orders
