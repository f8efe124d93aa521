job "a" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "x" }
      kill_timeout = "1.5ns"
      logs { max_files = 1  max_file_size = 1 }
      env { AB = 1.5e300  C = true  D = 7 }
    }
  }
}
