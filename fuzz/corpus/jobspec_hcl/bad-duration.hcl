job "a" {
  group "g" {
    restart { attempts = -1  interval = "30x"  delay = "1h5m3.5s"  mode = "delay" }
    task "t" {
      driver = "raw_exec"  kill_timeout = "9999999999h"
      config { command = "x" }
    }
  }
}
