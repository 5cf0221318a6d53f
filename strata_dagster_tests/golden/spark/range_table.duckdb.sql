SELECT i FROM range(3) t(i)
