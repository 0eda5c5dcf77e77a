from rocketcluster.broker.front.process import main

main()
