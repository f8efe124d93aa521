name = "a"
plugin_id = "mkdir"
capacity_min = "10 parsecs"
capacity_max = "18446744073709551616TiB"
