job "a" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "x" }
      env { A = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] }
    }
  }
}
