job "a" {
  datacenters = ["dc1"]
  group "g" { task "t" { driver = "docker" } }
}
