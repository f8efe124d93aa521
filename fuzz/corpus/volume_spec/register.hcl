type = "host"
name = "reg"
host_path = "/srv/existing"
capability {
  access_mode = "single-node-reader-only"
  attachment_mode = "block-device"
}
