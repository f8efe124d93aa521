job "a" {
  group "g" {
    count = 0
    restart { attempts = 0  interval = "5s"  delay = "0s" mode = "fail" }
    task "t" {
      driver = "raw_exec"
      config { command = "x"  args = [1, true, 2.5] }
      resources { cpu = 0  memory = 0 }
    }
  }
}
