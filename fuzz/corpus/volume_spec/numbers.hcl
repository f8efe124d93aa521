name = "x"
plugin_id = "p"
capacity_min = "1.5"
parameters { a = 1.0  b = 1e3  c = -0 }
