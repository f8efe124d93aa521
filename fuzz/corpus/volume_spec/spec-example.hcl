type      = "host"
name      = "test"                 # required; unique on this node
plugin_id = "mkdir"                # omit for `volume register`
capacity_min = "10MiB"             # optional; units b, kb/kib, mb/mib, gb/gib, tb/tib (case-insensitive)
capacity_max = "1GiB"              # optional; >= capacity_min
capability { access_mode = "single-node-writer"  attachment_mode = "file-system" }
parameters { mode = "0755" }       # opaque string map handed to the plugin
host_path = "/srv/existing"        # register only
