from rocketcluster.operator.main import main

main()
