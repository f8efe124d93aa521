job "a" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "x" }
      kill_timeout = "340282366920938463463374607431768211.9us"
    }
  }
}
