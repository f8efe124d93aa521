name = "a"
plugin_id = "p"
parameters = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = { a = 1 } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } } }
